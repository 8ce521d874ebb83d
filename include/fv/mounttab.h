/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mount table, queried (mounttab.c): always the kernel's
 * /proc/self/mountinfo (a thread's last read kept only while the kernel
 * reports no change to it), never fstab.  Queries only: mounts are made and
 * undone by fv/mountutil.h's actions.
 */
#ifndef FV_MOUNTTAB_H
#define FV_MOUNTTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct fv_mntinfo {
	char source[4096];
	char fstype[64];
	char root[4096];	/* root of the mount within its filesystem ("/" for a whole fs) */
	char vfs_options[1024]; /* per-mount options: "rw,relatime" */
	dev_t devno;		/* st_dev of the mounted filesystem */
	bool readonly;
};

/*
 * fv_mnt_find() - the topmost mount at @target.
 * Returns 0 and fills @ret (may be NULL), 1 when @target is not a mount point, or -errno.
 */
int fv_mnt_find(const char *target, struct fv_mntinfo *ret);

/*
 * One line of /proc/self/mountinfo, split in place (fv_mnt_parse_line()):
 * the strings point into the line, the kernel's \ooo escapes undone.
 */
struct fv_mntline {
	uint64_t id;
	dev_t devno;
	char *root, *target, *vfs_options, *fstype, *source;
};

/* Split the mountinfo line @line (no newline) in place.  0, or -EINVAL for a malformed line. */
int fv_mnt_parse_line(char *line, struct fv_mntline *ret);

/*
 * fv_mnt_find_source() - the first mount (in mount order) whose source is
 * @source and whose root is "/" - for a block device, the one that mounted
 * the whole filesystem first.  Targets equal to @exclude are skipped.
 * Returns 0 and the target in @ret, 1 if none, or -errno.
 */
int fv_mnt_find_source(const char *source, const char *exclude, char *ret, size_t len);

/* fv_mnt_find_source() skipping every target for which @skip(target, @arg) is true. */
int fv_mnt_find_source_skip(const char *source, bool (*skip)(const char *target, void *arg),
			    void *arg, char *ret, size_t len);

/*
 * How many mounts use device number @devno: those of the filesystem on it
 * (the mountinfo major:minor field: whole-fs mounts and bind mounts alike,
 * whatever path the source was given as) and, for a block device, the
 * binds of its node (a raw block volume's stage and publishes,
 * fv_mnt_node_devno()).  Returns the count or -errno.
 */
int fv_mnt_count_devno(dev_t devno);

/*
 * fv_mnt_node_devno() - is the mount @mi a bind of a block device's node:
 * devtmpfs, its root the node's name there ("/loop3")?  0 and the device
 * in *@ret, 1 when it is no such bind.  Reads sysfs, never the mount's
 * target: a raw block volume's mounts are told from the table alone.
 */
int fv_mnt_node_devno(const struct fv_mntinfo *mi, dev_t *ret);

/*
 * fv_mnt_find_node() - the first bind (in mount order) of the node of
 * block device @devno at a target that @skip (may be NULL) does not pass
 * over.  0 and the target in @ret, 1 none, or -errno.
 */
int fv_mnt_find_node(dev_t devno, bool (*skip)(const char *target, void *arg), void *arg,
		     char *ret, size_t len);

#endif
