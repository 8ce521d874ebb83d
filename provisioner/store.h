/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the watches know that the handlers ask about (runner.c fills it, the
 * worker threads read it): the name of every PV, and every StorageClass of one
 * of our backends.  A claim's handler looks its class and its PV up here
 * rather than asking the API each time, as an informer's lister does.  One
 * mutex; a handler gets a copy, never an object the watch thread changes.
 *
 * A handler whose fvp_prov has no store (unit tests, fuzz targets) asks the
 * API: every function here answers -ENOENT for a NULL store.
 */
#ifndef FVP_STORE_H
#define FVP_STORE_H

#include <json-c/json.h>
#include <stdbool.h>

struct fvp_store;

struct fvp_store *fvp_store_new(void);
void fvp_store_free(struct fvp_store *s);

/* PV @name exists (@on) or is gone, as a watch event or this process's own create says. */
void fvp_store_pv_set(struct fvp_store *s, const char *name, bool on);
/* 1 when PV @name exists, 0 when not, -ENOENT without a store. */
int fvp_store_pv_exists(struct fvp_store *s, const char *name);

/* StorageClass @sc (of one of our backends) as it is now; NULL @sc: @name is gone or not ours. */
void fvp_store_class_set(struct fvp_store *s, const char *name, json_object *sc);
/* 1 with a copy of class @name in *ret (the caller's), 0 when absent, -ENOENT without a store. */
int fvp_store_class(struct fvp_store *s, const char *name, json_object **ret);

/*
 * A re-list: @pvs (name -> anything) and @classes (name -> class) replace what
 * the store had, taken over.  NULL leaves that part as it is.
 */
void fvp_store_replace(struct fvp_store *s, json_object *pvs, json_object *classes);

#endif
