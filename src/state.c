/* SPDX-License-Identifier: Apache-2.0 */
/* Atomic state records, a cache of what the kernel knows (fv/state.h). */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <json-c/json.h>
#include <libgen.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/stat.h>

#include "internal.h"
#include "fv/state.h"
#include "fv/util.h"

/*
 * Remove the temporary files of @path that writers killed before their
 * rename() left ("<name>.tmp.<pid>" of a process that no longer exists): a
 * live writer's is left alone (a reused pid only delays the removal).
 */
static void sweep_tmp(const char *path)
{
	char dir[PATH_MAX], base[NAME_MAX + 1], prefix[NAME_MAX + 8];
	const char *slash = strrchr(path, '/');
	struct dirent *e;
	size_t n;
	DIR *d;

	if (!slash || (size_t)(slash - path) >= sizeof(dir))
		return;
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	snprintf(base, sizeof(base), "%s", slash + 1);
	n = (size_t)snprintf(prefix, sizeof(prefix), "%s.tmp.", base);
	d = opendir(dir[0] ? dir : "/");
	if (!d)
		return;
	while ((e = readdir(d))) {
		char *end;
		long pid;

		if (strncmp(e->d_name, prefix, n))
			continue;
		pid = strtol(e->d_name + n, &end, 10);
		if (*end || pid <= 0 || pid == getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		(void)unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
}

/*
 * The data goes into an unnamed file (O_TMPFILE) that gets its temporary
 * name only once it is complete, just before the rename(): a SIGKILL leaves
 * a "<name>.tmp.<pid>" only between those two calls, and the next write of
 * the record removes it (sweep_tmp()).  Without O_TMPFILE (a filesystem
 * that lacks it), the named file from the start.
 */
static int write_atomic(const char *path, const char *data, size_t len, unsigned int mode,
			bool sync)
{
	char tmp[PATH_MAX], dir[PATH_MAX], proc[32];
	_cleanup_close_ int dfd = -1;
	bool unnamed = true;
	int fd, r = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	sweep_tmp(path);
	snprintf(dir, sizeof(dir), "%s", path);
	fd = open(dirname(dir), O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
	if (fd < 0) {
		unnamed = false;
		fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	}
	if (fd < 0)
		return NEG_ERRNO();
	while (len > 0) {
		ssize_t n = write(fd, data, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? NEG_ERRNO() : -EIO;
			break;
		}
		data += n;
		len -= (size_t)n;
	}
	if (r == 0 && sync && fsync(fd) < 0)
		r = NEG_ERRNO();
	if (r == 0 && unnamed) {
		(void)unlink(tmp); /* a leftover of ours (a reused pid): linkat() does not replace */
		/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc/self/fd does not */
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
		if (linkat(fd, "", AT_FDCWD, tmp, AT_EMPTY_PATH) < 0 &&
		    linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) < 0)
			r = NEG_ERRNO();
	}
	if (close(fd) < 0 && r == 0)
		r = NEG_ERRNO();
	if (r == 0 && rename(tmp, path) < 0)
		r = NEG_ERRNO();
	if (r < 0) {
		unlink(tmp);
		return r;
	}
	if (!sync)
		return 0;
	/* make the rename itself durable */
	snprintf(dir, sizeof(dir), "%s", path);
	dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0)
		(void)fsync(dfd);
	return 0;
}

int fv_write_file_atomic(const char *path, const char *data, size_t len, unsigned int mode)
{
	return write_atomic(path, data, len, mode, true);
}

static int record_path(struct fv_ctx *cx, const char *key, char *buf, size_t len, bool mkdir)
{
	char esc[NAME_MAX - 16], dir[PATH_MAX];
	int r = fv_name_key(key, esc, sizeof(esc));

	if (r < 0)
		return r;
	snprintf(dir, sizeof(dir), "%s/%s", cx->cfg.state_dir, cx->drv->name);
	if (mkdir) {
		r = fv_mkdir_p(dir, 0700);
		if (r < 0)
			return r;
	}
	if (snprintf(buf, len, "%s/%s.json", dir, esc) >= (int)len)
		return -ENAMETOOLONG;
	return 0;
}

static int state_write(struct fv_ctx *cx, const char *key, struct json_object *obj, bool sync)
{
	char path[PATH_MAX];
	const char *s;
	int r = record_path(cx, key, path, sizeof(path), true);

	if (r < 0)
		return fv_fail(cx, r, "cannot create state under '%s': %s", cx->cfg.state_dir,
			       strerror(-r));
	s = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN |
							 JSON_C_TO_STRING_NOSLASHESCAPE);
	r = write_atomic(path, s, strlen(s), 0600, sync);
	if (r < 0)
		return fv_fail(cx, r, "cannot write state '%s': %s", path, strerror(-r));
	return 0;
}

int fv_state_write(struct fv_ctx *cx, const char *key, struct json_object *obj)
{
	return state_write(cx, key, obj, true);
}

int fv_state_write_boot(struct fv_ctx *cx, const char *key, struct json_object *obj)
{
	return state_write(cx, key, obj, false);
}

static int read_record_at(const char *dir, const char *file, struct json_object **ret)
{
	char path[PATH_MAX];
	json_object *obj;

	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	obj = json_object_from_file(path);
	if (!obj || !json_object_is_type(obj, json_type_object)) {
		json_object_put(obj);
		return 1;
	}
	*ret = obj;
	return 0;
}

int fv_state_read(struct fv_ctx *cx, const char *key, struct json_object **ret)
{
	char path[PATH_MAX];
	json_object *obj;
	int r = record_path(cx, key, path, sizeof(path), false);

	if (r < 0)
		return r;
	if (access(path, F_OK) < 0)
		return errno == ENOENT ? 1 : NEG_ERRNO();
	obj = json_object_from_file(path);
	if (!obj || !json_object_is_type(obj, json_type_object)) {
		/* a cache: an unreadable record is as good as none */
		json_object_put(obj);
		return 1;
	}
	*ret = obj;
	return 0;
}

int fv_state_remove(struct fv_ctx *cx, const char *key)
{
	char path[PATH_MAX];
	int r = record_path(cx, key, path, sizeof(path), false);

	if (r < 0)
		return r;
	if (unlink(path) < 0 && errno != ENOENT)
		return NEG_ERRNO();
	return 0;
}

int fv_state_age(struct fv_ctx *cx, const char *key, unsigned int *ret)
{
	char path[PATH_MAX];
	struct timespec now;
	struct stat st;
	int r = record_path(cx, key, path, sizeof(path), false);

	if (r < 0)
		return r;
	if (stat(path, &st) < 0)
		return errno == ENOENT ? 1 : NEG_ERRNO();
	clock_gettime(CLOCK_REALTIME, &now);
	*ret = now.tv_sec <= st.st_mtim.tv_sec ? 0 : (unsigned int)(now.tv_sec - st.st_mtim.tv_sec);
	return 0;
}

/* "%XX" -> the byte (fv_name_escape() backwards); false for a hashed or malformed name */
static bool unescape(const char *s, size_t n, char *out, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned int c = (unsigned char)s[i];

		if (s[i] == '~')
			return false; /* a long name's hash: not reversible */
		if (s[i] == '%') {
			if (i + 2 >= n || sscanf(s + i + 1, "%2x", &c) != 1 || !c)
				return false;
			i += 2;
		}
		if (o + 1 >= len)
			return false;
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return o > 0;
}

int fv_state_each(struct fv_ctx *cx, unsigned int max,
		  int (*fn)(struct fv_ctx *cx, const char *key, void *arg), void *arg)
{
	char dir[PATH_MAX], key[PATH_MAX];
	struct dirent **names = NULL;
	unsigned int start = 0, seen = 0;
	int n, r = 0;

	snprintf(dir, sizeof(dir), "%s/%s", cx->cfg.state_dir, cx->drv->name);
	n = scandir(dir, &names, NULL, NULL);
	if (n < 0)
		return errno == ENOENT ? 0 : NEG_ERRNO();
	if (max && (unsigned int)n > max) /* a bounded pass starts anywhere: all get their turn */
		start = (unsigned int)(fv_now_ms() ^ (uint64_t)getpid()) % (unsigned int)n;
	for (unsigned int i = 0; i < (unsigned int)n && r >= 0; i++) {
		const char *e = names[(start + i) % (unsigned int)n]->d_name;
		size_t len = strlen(e);
		json_object *rec = NULL, *k;

		if (len <= 5 || !streq(e + len - 5, ".json") || (max && seen >= max))
			continue;
		seen++;
		/* the key as written (long keys are hashed in the file name), else the name decoded */
		if (read_record_at(dir, e, &rec) == 0 && json_object_object_get_ex(rec, "key", &k) &&
		    json_object_is_type(k, json_type_string))
			snprintf(key, sizeof(key), "%s", json_object_get_string(k));
		else if (!unescape(e, len - 5, key, sizeof(key)))
			key[0] = '\0';
		json_object_put(rec);
		if (key[0])
			r = fn(cx, key, arg);
	}
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return r;
}
