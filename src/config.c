/* SPDX-License-Identifier: Apache-2.0 */
/* Node configuration: defaults < config file < environment (see fv/config.h). */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>

#include "fv/config.h"
#include "fv/driver.h"
#include "fv/kv.h"
#include "fv/util.h"

#define DEFAULT_CONFIG "/etc/flexvol/flexvol.conf"

enum kind { K_PATH, K_STR, K_SECONDS, K_SECONDS0, K_MODE, K_BOOL };

struct key {
	const char *name;
	const char *env;
	enum kind kind;
	size_t off;
	size_t size;
};

#define STR(field, k, e) { #field, e, k, offsetof(struct fv_config, field), sizeof(((struct fv_config *)0)->field) }
#define SEC(field, e) { #field, e, K_SECONDS, offsetof(struct fv_config, field), 0 }
#define SEC0(field, e) { #field, e, K_SECONDS0, offsetof(struct fv_config, field), 0 }
#define BOOL(field, e) { #field, e, K_BOOL, offsetof(struct fv_config, field), 0 }

static const struct key keys[] = {
	STR(loop_root, K_PATH, "FLEXVOL_LOOP_ROOT"),
	STR(state_dir, K_PATH, "FLEXVOL_STATE_DIR"),
	STR(run_dir, K_PATH, "FLEXVOL_RUN_DIR"),
	STR(log_file, K_PATH, "FLEXVOL_LOG_FILE"),
	STR(node_name, K_STR, "FLEXVOL_NODE_NAME"),
	STR(helper_path, K_STR, "FLEXVOL_HELPER_PATH"),
	SEC(lock_timeout, "FLEXVOL_LOCK_TIMEOUT"),
	SEC(helper_timeout, "FLEXVOL_HELPER_TIMEOUT"),
	SEC(mount_timeout, "FLEXVOL_MOUNT_TIMEOUT"),
	SEC(device_timeout, "FLEXVOL_DEVICE_TIMEOUT"),
	STR(attach_mode, K_MODE, "FLEXVOL_ATTACH_MODE"),
	SEC0(gc_grace, "FLEXVOL_GC_GRACE"),
	SEC0(gc_interval, "FLEXVOL_GC_INTERVAL"),
	BOOL(debug, "FLEXVOL_DEBUG"),
	STR(chap_dir, K_PATH, "FLEXVOL_CHAP_DIR"),
};

static int seterr(char *err, size_t errlen, const char *fmt, ...) _printf_(3, 4);
static int seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -FV_ERR_BADOPT;
}

/*
 * An error about the value from @src: "<src>:<line>: ..." for line @line of
 * the file @src, "<src>: ..." for the environment variable @src (@line 0).
 * Formatted only when there is an error.
 */
static int seterr_at(char *err, size_t errlen, const char *src, unsigned int line, const char *fmt,
		     ...) _printf_(5, 6);
static int seterr_at(char *err, size_t errlen, const char *src, unsigned int line, const char *fmt,
		     ...)
{
	va_list ap;
	int n = line ? snprintf(err, errlen, "%s:%u: ", src, line)
		     : snprintf(err, errlen, "%s: ", src);

	if (n >= 0 && (size_t)n < errlen) {
		va_start(ap, fmt);
		vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -FV_ERR_BADOPT;
}

/* Where the values go: every key into @cfg, or (@cfg NULL) attach_mode alone into @mode. */
struct sink {
	struct fv_config *cfg;
	char *mode;
};

/* Check @v for the key @k and store it (when @to keeps that key). */
static int set_key(const struct sink *to, const struct key *k, const char *v, const char *src,
		   unsigned int line, char *err, size_t errlen)
{
	char *dst = to->cfg ? (char *)to->cfg + k->off : k->kind == K_MODE ? to->mode : NULL;
	uint64_t n;

	switch (k->kind) {
	case K_PATH:
		if (v[0] != '/')
			return seterr_at(err, errlen, src, line,
					 "%s must be an absolute path: '%s'", k->name, v);
		/* fall through */
	case K_STR:
		if (!*v || strlen(v) >= k->size)
			return seterr_at(err, errlen, src, line,
					 "%s is empty or too long", k->name);
		if (dst)
			strcpy(dst, v);
		return 0;
	case K_MODE:
		if (!streq(v, "controller") && !streq(v, "node"))
			return seterr_at(err, errlen, src, line,
					 "%s must be 'controller' or 'node': '%s'", k->name, v);
		if (dst)
			strcpy(dst, v);
		return 0;
	case K_SECONDS:
		if (fv_parse_u64(v, &n) < 0 || n == 0 || n > 86400)
			return seterr_at(err, errlen, src, line,
					 "%s must be 1..86400 seconds: '%s'", k->name, v);
		if (dst)
			*(unsigned int *)(void *)dst = (unsigned int)n;
		return 0;
	case K_SECONDS0: /* 0 means "none" (no grace, no opportunistic pass) */
		if (fv_parse_u64(v, &n) < 0 || n > 7 * 86400)
			return seterr_at(err, errlen, src, line,
					 "%s must be 0..604800 seconds: '%s'", k->name, v);
		if (dst)
			*(unsigned int *)(void *)dst = (unsigned int)n;
		return 0;
	case K_BOOL:
		/* "all": what FLEXVOL_DEBUG took before it was a config key */
		if (streq(v, "true") || streq(v, "yes") || streq(v, "on") || streq(v, "1") ||
		    streq(v, "all")) {
			if (dst)
				*(bool *)(void *)dst = true;
		} else if (streq(v, "false") || streq(v, "no") || streq(v, "off") ||
			   streq(v, "0")) {
			if (dst)
				*(bool *)(void *)dst = false;
		} else {
			return seterr_at(err, errlen, src, line,
					 "%s must be true or false: '%s'", k->name, v);
		}
		return 0;
	}
	return -EINVAL;
}

static const struct key *find_key(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		if (streq(keys[i].name, name))
			return &keys[i];
	return NULL;
}

#define CONFIG_MAX (64 * 1024)

/*
 * Open the config file like any file we did not make: O_NONBLOCK, so a FIFO
 * cannot block the open, then only a regular file is read - or /dev/null,
 * which names "no config file" (the tests use it).  Anything else is a
 * Failure: a directory must not read as an empty config (a read failing
 * with EISDIR would look like EOF).  Returns the fd, or -1 with *ret < 0
 * (described in @err), or -1 with *ret == 0 and errno from open().  *ret_size:
 * the file's size when opened.
 */
static int open_config(const char *path, char *err, size_t errlen, int *ret, off_t *ret_size)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

	*ret = 0;
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0) {
		*ret = seterr(err, errlen, "cannot stat config '%s': %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode) &&
	    !(S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 && minor(st.st_rdev) == 3)) {
		*ret = seterr(err, errlen, "config '%s' is not a regular file", path);
		close(fd);
		return -1;
	}
	*ret_size = st.st_size;
	return fd;
}

/*
 * The whole file, up to CONFIG_MAX + 1 bytes, into a buffer of @text (two
 * bytes to spare), read(2) until EOF: no stdio (its FILE, its buffer and
 * two more syscalls), and a buffer the size of the file, @size_hint, plus
 * one (it grows when the file has grown since), not 64 KiB at once.
 * Returns the length or -errno.
 */
static ssize_t read_config(int fd, off_t size_hint, char **text)
{
	size_t size = CONFIG_MAX + 1, len = 0;
	char *buf, *p;

	if (size_hint <= 0) /* /dev/null, or a file made empty */
		size = 64;
	else if (size_hint < CONFIG_MAX)
		size = (size_t)size_hint + 1;
	buf = malloc(size + 2);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n;

		if (len == size) {
			if (size > CONFIG_MAX)
				break;
			size = size * 2 > CONFIG_MAX + 1 ? CONFIG_MAX + 1 : size * 2;
			p = realloc(buf, size + 2);
			if (!p) {
				free(buf);
				return -ENOMEM;
			}
			buf = p;
		}
		n = read(fd, buf + len, size - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			n = -errno;
			free(buf);
			return n;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*text = buf;
	return (ssize_t)len;
}

static int load_file(const struct sink *to, const char *path, bool must_exist, char *err,
		     size_t errlen)
{
	_cleanup_free_ char *text = NULL;
	char *name, *val;
	struct fv_kv it;
	ssize_t len;
	off_t size = 0;
	int r = 0;
	int fd = open_config(path, err, errlen, &r, &size);

	if (fd < 0) {
		if (r < 0)
			return r;
		if (errno == ENOENT && !must_exist)
			return 0;
		return seterr(err, errlen, "cannot read config '%s': %s", path, strerror(errno));
	}
	len = read_config(fd, size, &text);
	close(fd);
	if (len < 0)
		return seterr(err, errlen, "cannot read config '%s': %s", path,
			      strerror(len == -ENOMEM ? ENOMEM : EIO));
	if (len > CONFIG_MAX)
		return seterr(err, errlen, "config '%s' is larger than %d bytes", path, CONFIG_MAX);
	fv_kv_init(&it, text, (size_t)len, PATH_MAX + 64);
	while ((r = fv_kv_next(&it, &name, &val)) > 0) {
		const struct key *k = find_key(name);

		if (!k)
			return seterr(err, errlen, "%s:%u: unknown key '%s'", path, it.line, name);
		r = set_key(to, k, val, path, it.line, err, errlen);
		if (r < 0)
			return r;
	}
	if (r < 0)
		return seterr(err, errlen, "%s:%u: %s", path, it.line,
			      r == -E2BIG    ? "line too long"
			      : r == -EILSEQ ? "NUL byte in the line"
					     : "expected 'key = value'");
	return 0;
}

/*
 * Every field set, and no more: the strings' tails are left as they are (a
 * memset of the whole struct, 28 KiB, was a sixth of what `init` did in
 * user space, and touched every page of it).
 */
static void set_defaults(const struct sink *to, const char *driver)
{
	struct fv_config *cfg = to->cfg;

	if (!cfg) {
		strcpy(to->mode, "controller");
		return;
	}
	strcpy(cfg->attach_mode, "controller");
	cfg->lock_timeout = 150;
	cfg->helper_timeout = 120;
	cfg->mount_timeout = 60;
	cfg->device_timeout = 60;
	cfg->gc_grace = 600;
	cfg->gc_interval = 60;
	cfg->debug = false;
	cfg->node_name[0] = '\0';
	strcpy(cfg->loop_root, "/var/lib/flexvol/loop");
	strcpy(cfg->state_dir, "/var/lib/flexvol/state");
	strcpy(cfg->run_dir, "/run/flexvol");
	fv_join(cfg->log_file, sizeof(cfg->log_file), "/var/log/flexvol/", driver, ".log", NULL);
	strcpy(cfg->helper_path, "/usr/sbin:/usr/bin:/sbin:/bin");
	strcpy(cfg->chap_dir, "/etc/flexvol/chap");
}

static int load(const struct sink *to, const char *driver, char *err, size_t errlen)
{
	const char *path = secure_getenv("FLEXVOL_CONFIG");
	struct utsname u;
	int r;

	set_defaults(to, driver);
	r = load_file(to, path && *path ? path : DEFAULT_CONFIG, path && *path, err, errlen);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		const char *v = secure_getenv(keys[i].env);

		if (v && *v) {
			r = set_key(to, &keys[i], v, keys[i].env, 0, err, errlen);
			if (r < 0)
				return r;
		}
	}
	/* kubelet's default node name, when neither the file nor the environment gives one */
	if (to->cfg && !to->cfg->node_name[0] && uname(&u) == 0)
		fv_join(to->cfg->node_name, sizeof(to->cfg->node_name), u.nodename, NULL);
	return 0;
}

int fv_config_load(struct fv_config *cfg, const char *driver, char *err, size_t errlen)
{
	const struct sink to = { .cfg = cfg };

	return load(&to, driver, err, errlen);
}

int fv_config_attach_mode(char *mode, char *err, size_t errlen)
{
	const struct sink to = { .mode = mode };

	return load(&to, NULL, err, errlen);
}

int fv_config_check_file(struct fv_config *cfg, const char *driver, const char *path, char *err,
			 size_t errlen)
{
	const struct sink to = { .cfg = cfg };

	set_defaults(&to, driver);
	return load_file(&to, path, true, err, errlen);
}
