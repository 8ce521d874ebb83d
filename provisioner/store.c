/* SPDX-License-Identifier: Apache-2.0 */
/* The watch caches the handlers read: see store.h. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "store.h"

struct fvp_store {
	pthread_mutex_t lock;
	json_object *pvs;     /* name -> null: a set */
	json_object *classes; /* name -> class (trimmed) */
};

struct fvp_store *fvp_store_new(void)
{
	struct fvp_store *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->pvs = json_object_new_object();
	s->classes = json_object_new_object();
	if (!s->pvs || !s->classes) {
		fvp_store_free(s);
		return NULL;
	}
	pthread_mutex_init(&s->lock, NULL);
	return s;
}

void fvp_store_free(struct fvp_store *s)
{
	if (!s)
		return;
	json_object_put(s->pvs);
	json_object_put(s->classes);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

void fvp_store_pv_set(struct fvp_store *s, const char *name, bool on)
{
	if (!s || !name)
		return;
	pthread_mutex_lock(&s->lock);
	if (on)
		json_object_object_add(s->pvs, name, NULL);
	else
		json_object_object_del(s->pvs, name);
	pthread_mutex_unlock(&s->lock);
}

int fvp_store_pv_exists(struct fvp_store *s, const char *name)
{
	int r;

	if (!s)
		return -ENOENT;
	pthread_mutex_lock(&s->lock);
	r = json_object_object_get_ex(s->pvs, name, NULL);
	pthread_mutex_unlock(&s->lock);
	return r;
}

void fvp_store_class_set(struct fvp_store *s, const char *name, json_object *sc)
{
	json_object *copy = NULL;

	if (!s || !name)
		return;
	/* the store's own copy: json-c's reference counts are not shared between threads */
	if (sc && (json_object_deep_copy(sc, &copy, NULL) < 0 || !copy))
		return;
	pthread_mutex_lock(&s->lock);
	if (copy)
		json_object_object_add(s->classes, name, copy);
	else
		json_object_object_del(s->classes, name);
	pthread_mutex_unlock(&s->lock);
}

int fvp_store_class(struct fvp_store *s, const char *name, json_object **ret)
{
	json_object *sc;
	int r = 0;

	*ret = NULL;
	if (!s)
		return -ENOENT;
	pthread_mutex_lock(&s->lock);
	if (json_object_object_get_ex(s->classes, name, &sc) && sc)
		r = json_object_deep_copy(sc, ret, NULL) < 0 || !*ret ? -ENOMEM : 1;
	pthread_mutex_unlock(&s->lock);
	return r;
}

void fvp_store_replace(struct fvp_store *s, json_object *pvs, json_object *classes)
{
	json_object *old_pvs = NULL, *old_classes = NULL;

	if (!s) {
		json_object_put(pvs);
		json_object_put(classes);
		return;
	}
	pthread_mutex_lock(&s->lock);
	if (pvs) {
		old_pvs = s->pvs;
		s->pvs = pvs;
	}
	if (classes) {
		old_classes = s->classes;
		s->classes = classes;
	}
	pthread_mutex_unlock(&s->lock);
	json_object_put(old_pvs);
	json_object_put(old_classes);
}
