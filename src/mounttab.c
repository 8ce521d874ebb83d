/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mount table, queried (fv/mounttab.h): the kernel's
 * /proc/self/mountinfo read whole, split line by line, and searched.  No
 * mount is made or undone here (mountutil.c), no directory argument opened
 * (dirarg.c).
 */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <linux/mount.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "internal.h"
#include "fv/mounttab.h"
#include "fv/util.h"

/*
 * The kernel's table, /proc/self/mountinfo, read whole and walked line by
 * line here rather than through libmount's table: a call looks up one mount
 * or counts a few, and libmount's parse (a dozen allocations and copies per
 * line, its buffers' page faults) cost more than the rest of a pod's mount.
 * The format (proc_pid_mountinfo(5)): "ID PARENT MAJ:MIN ROOT TARGET
 * VFS-OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS", one space between
 * fields (an empty source leaves two), and the kernel escapes space, tab,
 * newline and backslash in the strings as \ooo.
 */
#define MOUNTINFO_MAX (64U << 20) /* a table larger than this is no node's */
#define DELETED_SUFFIX " (deleted)"

bool fv_mnt_no_statmount;
__thread unsigned fv_mnt_table_reads;
unsigned fv_mnt_statmount_hits;

/* Undo the kernel's \ooo escapes in place. */
static void unmangle(char *s)
{
	char *d = s;

	for (; *s; s++, d++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*d = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*d = *s;
		}
	}
	*d = '\0';
}

/* The next field of the line at *@s (cut at the next space), or NULL at its end. */
static char *next_field(char **s)
{
	char *f = *s, *sp;

	if (!f)
		return NULL;
	sp = strchr(f, ' ');
	if (sp) {
		*sp = '\0';
		*s = sp + 1;
	} else {
		*s = NULL;
	}
	return f;
}

int fv_mnt_parse_line(char *line, struct fv_mntline *ret)
{
	char *s = line, *f[6], *end;
	unsigned long long id;
	unsigned int maj, min;
	size_t n;

	for (int i = 0; i < 6; i++)
		if (!(f[i] = next_field(&s)))
			return -EINVAL;
	errno = 0;
	id = strtoull(f[0], &end, 10);
	if (errno || end == f[0] || *end || sscanf(f[2], "%u:%u", &maj, &min) != 2)
		return -EINVAL;
	/* optional fields up to the "-" separator */
	for (char *o; (o = next_field(&s)) && !streq(o, "-");)
		;
	ret->fstype = next_field(&s);
	ret->source = next_field(&s);
	if (!ret->fstype || !ret->source)
		return -EINVAL;
	ret->id = id;
	ret->devno = makedev(maj, min);
	ret->root = f[3];
	ret->target = f[4];
	ret->vfs_options = f[5];
	unmangle(ret->root);
	unmangle(ret->target);
	unmangle(ret->vfs_options);
	unmangle(ret->fstype);
	unmangle(ret->source);
	/* d_path's mark of an unlinked mount point is not part of the path */
	n = strlen(ret->target);
	if (n > strlen(DELETED_SUFFIX) && streq(ret->target + n - strlen(DELETED_SUFFIX),
						DELETED_SUFFIX))
		ret->target[n - strlen(DELETED_SUFFIX)] = '\0';
	return 0;
}

/*
 * The table, read whole and split, kept by the thread that read it together
 * with the mountinfo file it came from, and read again only once the kernel
 * says it changed: poll(2) on that file reports POLLPRI when the namespace's
 * table has changed since the open (fs/proc_namespace.c, mounts_poll(): what
 * libmount's and systemd's table monitors wait for).  Every mount, umount,
 * move and change of a mount's flags counts; the superblock's own options
 * can change without it, and nothing here reads them.  A call asks its
 * questions of one table until its own mount or umount, or anyone's, makes
 * it stale: the kernel writes the table at some 2 us a mount (46 us for 22
 * mounts here, 0.4 ms for 320), and a pod's mountdevice asked three times.
 * One per thread (flexvol-csi serves each call on a thread of its own, whose
 * end frees it), never shared; a walk in progress keeps its table.  Nothing
 * here changes its mount namespace (a forked child may, so it reads anew).
 */
struct table {
	int fd;
	pid_t pid; /* of the process that read it: a child of a fork reads its own */
	char *buf;
	struct fv_mntline *lines;
	size_t n;
	unsigned walks; /* walks in progress: a nested query reuses their table */
};

static __thread struct table tab = { .fd = -1 };
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;
static pthread_key_t tab_key;
static bool tab_key_ok;

static void table_drop(void)
{
	if (tab.fd >= 0)
		close(tab.fd);
	free(tab.buf);
	free(tab.lines);
	tab = (struct table){ .fd = -1 };
}

static void table_at_exit(void *unused)
{
	table_drop();
}

static void table_key_make(void)
{
	tab_key_ok = pthread_key_create(&tab_key, table_at_exit) == 0;
}

/* The whole table from @fd in a malloc'd, NUL-terminated buffer (*@ret). */
static int read_table(int fd, char **ret)
{
	size_t size = 16384, len = 0;
	char *buf = NULL;

	for (;;) {
		ssize_t n;

		if (len + 1 >= size || !buf) {
			char *b;

			if (buf)
				size *= 2;
			if (size > MOUNTINFO_MAX) {
				free(buf);
				return -EFBIG;
			}
			b = realloc(buf, size);
			if (!b) {
				free(buf);
				return -ENOMEM;
			}
			buf = b;
		}
		n = read(fd, buf + len, size - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int r = NEG_ERRNO();

			free(buf);
			return r;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	*ret = buf;
	return 0;
}

/* Split tab.buf into tab.lines.  A line the kernel would never write is -EIO. */
static int split_table(void)
{
	size_t cap = 0;
	char *line, *next;

	for (line = tab.buf; *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		else
			next = line + strlen(line);
		if (tab.n == cap) {
			struct fv_mntline *l = realloc(tab.lines, (cap = cap ? 2 * cap : 64) *
								  sizeof(*l));

			if (!l)
				return -ENOMEM;
			tab.lines = l;
		}
		if (fv_mnt_parse_line(line, &tab.lines[tab.n]) < 0)
			return -EIO;
		tab.n++;
	}
	return 0;
}

/* tab as the kernel has it now: kept, or read anew.  0 or -errno (tab then empty). */
static int table_current(void)
{
	struct pollfd p = { .fd = tab.fd, .events = POLLPRI };
	int r;

	if (tab.walks)
		return 0;
	/* no event: unchanged (POLLIN, always set, was not asked for) */
	if (tab.fd >= 0 && tab.pid == getpid() && poll(&p, 1, 0) == 0)
		return 0;
	table_drop();
	if (pthread_once(&tab_once, table_key_make) == 0 && tab_key_ok)
		(void)pthread_setspecific(tab_key, &tab); /* any value but NULL: the destructor runs */
	/* opened before the read: a change during it shows at the next poll */
	tab.fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	tab.pid = getpid();
	r = tab.fd < 0 ? NEG_ERRNO() : read_table(tab.fd, &tab.buf);
	if (r == 0)
		r = split_table();
	if (r < 0)
		table_drop();
	else
		fv_mnt_table_reads++;
	return r;
}

/*
 * Call @fn on each mount in table order until it returns true.  Returns 1
 * when @fn stopped the walk, 0 at the table's end, or -errno (a line the
 * kernel would never write is -EIO: no half-read table decides anything).
 */
int fv_mnt_each(bool (*fn)(const struct fv_mntline *m, void *arg), void *arg)
{
	int r = table_current();

	if (r < 0)
		return r;
	tab.walks++;
	r = 0;
	for (size_t i = 0; i < tab.n && !r; i++)
		r = fn(&tab.lines[i], arg) ? 1 : 0;
	tab.walks--;
	return r;
}

/* --- queries ---------------------------------------------------------------- */

static bool has_option(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; p; p = strchr(p, ','), p = p ? p + 1 : NULL)
		if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == '\0' || p[n] == '='))
			return true;
	return false;
}

static void fill_info(const struct fv_mntline *m, struct fv_mntinfo *ret)
{
	if (!ret)
		return;
	/* each string set whole: no memset of the 9 KiB (page faults on the stack) */
	snprintf(ret->source, sizeof(ret->source), "%s", m->source);
	snprintf(ret->fstype, sizeof(ret->fstype), "%s", m->fstype);
	snprintf(ret->root, sizeof(ret->root), "%s", m->root);
	snprintf(ret->vfs_options, sizeof(ret->vfs_options), "%s", m->vfs_options);
	ret->devno = m->devno;
	ret->readonly = has_option(ret->vfs_options, "ro");
}

struct find_target {
	const char *target;
	struct fv_mntinfo *ret;
	bool found;
};

static bool find_target_fn(const struct fv_mntline *m, void *arg)
{
	struct find_target *a = arg;

	/* the last one in table order is the topmost */
	if (streq(m->target, a->target)) {
		fill_info(m, a->ret);
		a->found = true;
	}
	return false;
}

int fv_mnt_find(const char *target, struct fv_mntinfo *ret)
{
	struct find_target a = { .target = target, .ret = ret };
	int r = fv_mnt_each(find_target_fn, &a);

	if (r < 0)
		return r;
	return a.found ? 0 : 1;
}

static bool skip_exclude(const char *target, void *arg)
{
	return arg && streq(target, (const char *)arg);
}

int fv_mnt_find_source(const char *source, const char *exclude, char *ret, size_t len)
{
	return fv_mnt_find_source_skip(source, skip_exclude, (void *)exclude, ret, len);
}

struct find_source {
	const char *source;
	bool (*skip)(const char *target, void *arg);
	void *arg;
	char *ret;
	size_t len;
};

static bool find_source_fn(const struct fv_mntline *m, void *arg)
{
	struct find_source *a = arg;

	if (!streq(m->source, a->source) || !streq(m->root, "/") || a->skip(m->target, a->arg))
		return false;
	snprintf(a->ret, a->len, "%s", m->target);
	return true;
}

int fv_mnt_find_source_skip(const char *source, bool (*skip)(const char *target, void *arg),
			    void *arg, char *ret, size_t len)
{
	struct find_source a = { source, skip, arg, ret, len };
	int r = fv_mnt_each(find_source_fn, &a);

	if (r < 0)
		return r;
	return r == 1 ? 0 : 1;
}

/*
 * A raw block volume's stage and publishes are binds of its device's node
 * (fv/mounttab.h): the table shows them as mounts of devtmpfs whose root is
 * the node's name there ("/loop3"), which sysfs maps to the device
 * ("/sys/class/block/loop3/dev", a '/' in the name is sysfs's '!').  Only
 * devtmpfs counts: its nodes are the kernel's own, named as the kernel
 * names the devices, and flexvol binds from nowhere else.
 */
#define NODE_FSTYPE "devtmpfs"

/* The devtmpfs name of block device @devno ("loop3"), from sysfs: 0, or -ENOENT (none). */
static int node_name_of(dev_t devno, char *buf, size_t len)
{
	char link[64], target[PATH_MAX];
	ssize_t n;

	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", major(devno), minor(devno));
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return -ENOENT;
	target[n] = '\0';
	if ((size_t)snprintf(buf, len, "%s", fv_path_last(target)) >= len)
		return -ENAMETOOLONG;
	for (char *p = buf; *p; p++)
		if (*p == '!')
			*p = '/';
	return 0;
}

int fv_mnt_node_devno(const struct fv_mntinfo *mi, dev_t *ret)
{
	char name[NAME_MAX + 1], path[PATH_MAX], num[32];
	unsigned int maj, min;

	if (!streq(mi->fstype, NODE_FSTYPE) || mi->root[0] != '/' || !mi->root[1] ||
	    strstr(mi->root, "/.") ||
	    (size_t)snprintf(name, sizeof(name), "%s", mi->root + 1) >= sizeof(name))
		return 1;
	for (char *p = name; *p; p++)
		if (*p == '/')
			*p = '!';
	snprintf(path, sizeof(path), "/sys/class/block/%s/dev", name);
	if (fv_read_line(path, num, sizeof(num)) < 0 || sscanf(num, "%u:%u", &maj, &min) != 2)
		return 1;
	*ret = makedev(maj, min);
	return 0;
}

struct count_devno {
	dev_t devno;
	char node[NAME_MAX + 2]; /* "/<name>": the root of a bind of its node; "" none */
	int n;
};

static bool count_devno_fn(const struct fv_mntline *m, void *arg)
{
	struct count_devno *a = arg;

	if (m->devno == a->devno ||
	    (a->node[0] && streq(m->root, a->node) && streq(m->fstype, NODE_FSTYPE)))
		a->n++;
	return false;
}

int fv_mnt_count_devno(dev_t devno)
{
	struct count_devno a = { .devno = devno };
	int r;

	if (node_name_of(devno, a.node + 1, sizeof(a.node) - 1) == 0)
		a.node[0] = '/';
	else
		a.node[0] = '\0';
	r = fv_mnt_each(count_devno_fn, &a);
	return r < 0 ? r : a.n;
}

struct find_node {
	char node[NAME_MAX + 2];
	bool (*skip)(const char *target, void *arg);
	void *arg;
	char *ret;
	size_t len;
};

static bool find_node_fn(const struct fv_mntline *m, void *arg)
{
	struct find_node *a = arg;

	if (!streq(m->root, a->node) || !streq(m->fstype, NODE_FSTYPE) ||
	    (a->skip && a->skip(m->target, a->arg)))
		return false;
	snprintf(a->ret, a->len, "%s", m->target);
	return true;
}

int fv_mnt_find_node(dev_t devno, bool (*skip)(const char *target, void *arg), void *arg,
		     char *ret, size_t len)
{
	struct find_node a = { .skip = skip, .arg = arg, .ret = ret, .len = len };
	int r = node_name_of(devno, a.node + 1, sizeof(a.node) - 1);

	if (r < 0)
		return 1; /* no block device: no node of it is bound */
	a.node[0] = '/';
	r = fv_mnt_each(find_node_fn, &a);
	if (r < 0)
		return r;
	return r == 1 ? 0 : 1;
}

struct find_id {
	uint64_t id;
	struct fv_mntinfo *ret;
};

static bool find_id_fn(const struct fv_mntline *m, void *arg)
{
	struct find_id *a = arg;

	if (m->id != a->id)
		return false;
	fill_info(m, a->ret);
	return true;
}

static int find_id(uint64_t id, struct fv_mntinfo *ret)
{
	struct find_id a = { id, ret };
	int r = fv_mnt_each(find_id_fn, &a);

	if (r < 0)
		return r;
	return r == 1 ? 0 : -ENOENT;
}

/*
 * One mount asked of the kernel by its unique ID with statmount(2), rather
 * than the whole table formatted and searched for it: on a node of 20
 * mounts the table's read alone takes 26 us, and a pod's cycle looks its
 * mounts up ten times (docs/benchmarks.md).  Linux 6.8 has the call, the
 * source string (which the lookups need) since 6.13; -EOPNOTSUPP without
 * either, and the caller reads the table.  The layout is the kernel's
 * uapi (linux/mount.h), which Debian 12's headers (6.1) do not have yet;
 * the strings come unescaped.
 */
#ifndef __NR_statmount
#define __NR_statmount 457 /* the same number on every architecture */
#endif
#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x00004000U
#endif
#define SM_SB_BASIC 0x0001U
#define SM_MNT_BASIC 0x0002U
#define SM_MNT_ROOT 0x0008U
#define SM_FS_TYPE 0x0020U
#define SM_SB_SOURCE 0x0200U
#define SM_WANT (SM_SB_BASIC | SM_MNT_BASIC | SM_MNT_ROOT | SM_FS_TYPE | SM_SB_SOURCE)

struct sm_req {
	uint32_t size, spare;
	uint64_t mnt_id, param;
};

struct sm_reply {
	uint32_t size, mnt_opts;
	uint64_t mask;
	uint32_t sb_dev_major, sb_dev_minor;
	uint64_t sb_magic;
	uint32_t sb_flags, fs_type;
	uint64_t mnt_id, mnt_parent_id;
	uint32_t mnt_id_old, mnt_parent_id_old;
	uint64_t mnt_attr, mnt_propagation, mnt_peer_group, mnt_master, propagate_from;
	uint32_t mnt_root, mnt_point;
	uint64_t mnt_ns_id;
	uint32_t fs_subtype, sb_source;
	uint64_t spare2[48];
	char str[]; /* the strings; the fields above hold their offsets here */
};
_Static_assert(sizeof(struct sm_reply) == 512, "struct statmount is 512 bytes before its strings");

/* the per-mount options as mountinfo writes them (show_mnt_opts()), from MOUNT_ATTR_* */
static void vfs_options_of(uint64_t attr, char *buf, size_t len)
{
	uint64_t atime = attr & MOUNT_ATTR__ATIME;

	snprintf(buf, len, "%s%s%s%s%s%s%s%s%s", attr & MOUNT_ATTR_RDONLY ? "ro" : "rw",
		 attr & MOUNT_ATTR_NOSUID ? ",nosuid" : "", attr & MOUNT_ATTR_NODEV ? ",nodev" : "",
		 attr & MOUNT_ATTR_NOEXEC ? ",noexec" : "",
		 atime == MOUNT_ATTR_NOATIME ? ",noatime" : "",
		 attr & MOUNT_ATTR_NODIRATIME ? ",nodiratime" : "",
		 atime == MOUNT_ATTR_RELATIME ? ",relatime" : "",
		 attr & MOUNT_ATTR_NOSYMFOLLOW ? ",nosymfollow" : "",
		 attr & MOUNT_ATTR_IDMAP ? ",idmapped" : "");
}

static int stat_mount(uint64_t id, struct fv_mntinfo *ret)
{
	struct sm_req req = { .size = 24, .mnt_id = id, .param = SM_WANT };
	size_t size = sizeof(struct sm_reply) + sizeof(ret->source) + sizeof(ret->root) +
		      sizeof(ret->fstype);
	_cleanup_free_ struct sm_reply *sm = malloc(size);
	int r;

	if (!sm)
		return -ENOMEM;
	r = (int)syscall(__NR_statmount, &req, sm, size, 0);
	if (r < 0)
		return errno == ENOENT ? -ENOENT
		       : errno == ENOSYS || errno == EINVAL || errno == EOVERFLOW ? -EOPNOTSUPP
										  : NEG_ERRNO();
	if ((sm->mask & SM_WANT) != SM_WANT)
		return -EOPNOTSUPP;
	snprintf(ret->source, sizeof(ret->source), "%s", sm->str + sm->sb_source);
	snprintf(ret->fstype, sizeof(ret->fstype), "%s", sm->str + sm->fs_type);
	snprintf(ret->root, sizeof(ret->root), "%s", sm->str + sm->mnt_root);
	vfs_options_of(sm->mnt_attr, ret->vfs_options, sizeof(ret->vfs_options));
	ret->devno = makedev(sm->sb_dev_major, sm->sb_dev_minor);
	ret->readonly = sm->mnt_attr & MOUNT_ATTR_RDONLY;
	fv_mnt_statmount_hits++;
	return 0;
}

int fv_mnt_of_fd(int fd, struct fv_mntinfo *ret)
{
	struct statx stx;
	int r;

	if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_MNT_ID | STATX_MNT_ID_UNIQUE,
		  &stx) < 0)
		return NEG_ERRNO();
	if (!(stx.stx_mask & (STATX_MNT_ID | STATX_MNT_ID_UNIQUE)) ||
	    !(stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT))
		return -EOPNOTSUPP;
	if (!(stx.stx_attributes & STATX_ATTR_MOUNT_ROOT))
		return 1;
	if (!ret)
		return 0;
	if (stx.stx_mask & STATX_MNT_ID_UNIQUE) {
		r = fv_mnt_no_statmount ? -EOPNOTSUPP : stat_mount(stx.stx_mnt_id, ret);
		if (r != -EOPNOTSUPP)
			return r == -ENOENT ? 1 : r;
		/* the table knows mounts by their reusable IDs */
		if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_MNT_ID, &stx) < 0)
			return NEG_ERRNO();
	}
	r = find_id(stx.stx_mnt_id, ret);
	/* a mount that went away between statx() and the table read: not mounted */
	return r == -ENOENT ? 1 : r;
}
