/* SPDX-License-Identifier: Apache-2.0 */
/* Atomic state records, a cache of what the kernel knows (fv/state.h). */
#include <fcntl.h>
#include <limits.h>
#include <json-c/json.h>
#include <libgen.h>
#include <stdio.h>
#include <sys/stat.h>

#include "internal.h"
#include "fv/state.h"
#include "fv/util.h"

int fv_write_file_atomic(const char *path, const char *data, size_t len, unsigned int mode)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	_cleanup_close_ int dfd = -1;
	int fd, r = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
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
