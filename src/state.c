/* SPDX-License-Identifier: Apache-2.0 */
/* Atomic state records, a cache of what the kernel knows (fv/state.h). */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <json-c/json.h>
#include <libgen.h>
#include <stdio.h>
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
int fv_write_file_atomic(const char *path, const char *data, size_t len, unsigned int mode)
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
	if (r == 0 && fsync(fd) < 0)
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
	/* make the rename itself durable */
	snprintf(dir, sizeof(dir), "%s", path);
	dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0)
		(void)fsync(dfd);
	return 0;
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

int fv_state_write(struct fv_ctx *cx, const char *key, struct json_object *obj)
{
	char path[PATH_MAX];
	const char *s;
	int r = record_path(cx, key, path, sizeof(path), true);

	if (r < 0)
		return fv_fail(cx, r, "cannot create state under '%s': %s", cx->cfg.state_dir,
			       strerror(-r));
	s = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN |
							 JSON_C_TO_STRING_NOSLASHESCAPE);
	r = fv_write_file_atomic(path, s, strlen(s), 0600);
	if (r < 0)
		return fv_fail(cx, r, "cannot write state '%s': %s", path, strerror(-r));
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
