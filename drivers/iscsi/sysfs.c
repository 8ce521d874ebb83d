/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The kernel's view of iSCSI sessions and their LUN disks, through libudev:
 * sessions are the devices of subsystem "iscsi_session"; the disks of a
 * session are the block devices of type "disk" below its transport device
 * (udev_enumerate_add_match_parent), each with its LUN from the parent
 * "scsi_device" (H:C:T:L).  Lists grow as needed: no fixed limit (a
 * target may export hundreds of LUNs, and a truncated list would make the
 * logout decision miss a mounted LUN).
 *
 * libudev reads /sys itself and takes no other root; the host-lane unit
 * tests (tests/unit/test-iscsi-view.c) therefore run it in a private mount
 * namespace with a captured tree mounted on /sys, the way systemd's udev
 * tests do.  Device nodes are looked up below FLEXVOL_DEV_ROOT (default
 * /dev), which the tests point at a scratch directory.
 */
#include <fcntl.h>
#include <libudev.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "fv/mountutil.h"
#include "iscsi.h"

static void udev_unrefp(struct udev **p)
{
	if (*p)
		udev_unref(*p);
}

static void udev_enumerate_unrefp(struct udev_enumerate **p)
{
	if (*p)
		udev_enumerate_unref(*p);
}

static void udev_device_unrefp(struct udev_device **p)
{
	if (*p)
		udev_device_unref(*p);
}

const char *iscsi_dev_root(void)
{
	const char *r = secure_getenv("FLEXVOL_DEV_ROOT");

	return r && *r ? r : "/dev";
}

/* Append @elem (@size bytes) to the array *@arr of *@n elements. */
static int append(void *arr, size_t *n, const void *elem, size_t size)
{
	void **a = arr;
	/* capacity doubles at powers of two */
	if ((*n & (*n - 1)) == 0) {
		void *p = realloc(*a, (*n ? *n * 2 : 4) * size);

		if (!p)
			return -ENOMEM;
		*a = p;
	}
	memcpy((char *)*a + *n * size, elem, size);
	(*n)++;
	return 0;
}

static int parse_sid(const char *name, int *sid)
{
	char x;

	return name && sscanf(name, "session%d%c", sid, &x) == 1 ? 0 : -EINVAL;
}

/* The disks below the session device @parent (the transport device "sessionN"). */
static int load_disks(struct udev *udev, struct udev_device *parent, int sid, struct iscsi_view *v)
{
	_cleanup_(udev_enumerate_unrefp) struct udev_enumerate *e = udev_enumerate_new(udev);
	struct udev_list_entry *le;
	int r;

	if (!e)
		return -ENOMEM;
	if (udev_enumerate_add_match_parent(e, parent) < 0 ||
	    udev_enumerate_add_match_subsystem(e, "block") < 0 ||
	    udev_enumerate_add_match_property(e, "DEVTYPE", "disk") < 0)
		return -ENOMEM;
	r = udev_enumerate_scan_devices(e);
	if (r < 0)
		return r;
	udev_list_entry_foreach(le, udev_enumerate_get_list_entry(e))
	{
		_cleanup_(udev_device_unrefp) struct udev_device *d =
			udev_device_new_from_syspath(udev, udev_list_entry_get_name(le));
		struct udev_device *sd;
		struct iscsi_disk dk = { .sid = sid };
		unsigned int h, c, t;
		char x;

		if (!d)
			continue; /* gone meanwhile */
		sd = udev_device_get_parent_with_subsystem_devtype(d, "scsi", "scsi_device");
		if (!sd || sscanf(udev_device_get_sysname(sd), "%u:%u:%u:%u%c", &h, &c, &t, &dk.lun,
				  &x) != 4)
			continue;
		dk.devt = udev_device_get_devnum(d);
		if (!major(dk.devt) && !minor(dk.devt))
			continue;
		snprintf(dk.name, sizeof(dk.name), "%s", udev_device_get_sysname(d));
		r = append(&v->disks, &v->ndisks, &dk, sizeof(dk));
		if (r < 0)
			return r;
	}
	return 0;
}

/* A session attribute; "(null)" (the kernel's word for unset) and absent are "". */
static void sysattr(struct udev_device *d, const char *name, char *buf, size_t len)
{
	const char *x = udev_device_get_sysattr_value(d, name);

	snprintf(buf, len, "%s", x && !streq(x, "(null)") ? x : "");
}

/* "addr:port" of the session's first connection (IPv6 in brackets), or "". */
static void session_address(int sid, char *buf, size_t len)
{
	char p[PATH_MAX], addr[128] = "", port[16] = "";

	snprintf(p, sizeof(p), "/sys/class/iscsi_connection/connection%d:0/persistent_address", sid);
	if (fv_read_line(p, addr, sizeof(addr)) <= 0)
		snprintf(addr, sizeof(addr), "%s", "");
	snprintf(p, sizeof(p), "/sys/class/iscsi_connection/connection%d:0/persistent_port", sid);
	if (fv_read_line(p, port, sizeof(port)) <= 0)
		port[0] = '\0';
	if (!addr[0] || !port[0])
		buf[0] = '\0';
	else
		snprintf(buf, len, strchr(addr, ':') ? "[%s]:%s" : "%s:%s", addr, port);
}

int iscsi_session_chap(int sid, struct chap *c)
{
	_cleanup_(udev_unrefp) struct udev *udev = udev_new();
	_cleanup_(udev_device_unrefp) struct udev_device *d = NULL;
	char name[32];

	memset(c, 0, sizeof(*c));
	snprintf(name, sizeof(name), "session%d", sid);
	d = udev ? udev_device_new_from_subsystem_sysname(udev, "iscsi_session", name) : NULL;
	if (!d)
		return -ENOENT;
	sysattr(d, "username", c->user, sizeof(c->user));
	sysattr(d, "password", c->pass, sizeof(c->pass));
	sysattr(d, "username_in", c->user_in, sizeof(c->user_in));
	sysattr(d, "password_in", c->pass_in, sizeof(c->pass_in));
	return 0;
}

int iscsi_view_load(struct iscsi_view *v, const char *iqn)
{
	_cleanup_(udev_unrefp) struct udev *udev = udev_new();
	_cleanup_(udev_enumerate_unrefp) struct udev_enumerate *e = NULL;
	struct udev_list_entry *le;
	int r;

	memset(v, 0, sizeof(*v));
	if (!udev)
		return -ENOMEM;
	e = udev_enumerate_new(udev);
	if (!e || udev_enumerate_add_match_subsystem(e, "iscsi_session") < 0)
		return -ENOMEM;
	r = udev_enumerate_scan_devices(e);
	if (r < 0)
		return r == -ENOENT ? 0 : r; /* no iSCSI transport loaded: no sessions */
	udev_list_entry_foreach(le, udev_enumerate_get_list_entry(e))
	{
		_cleanup_(udev_device_unrefp) struct udev_device *d =
			udev_device_new_from_syspath(udev, udev_list_entry_get_name(le));
		struct iscsi_session s = { 0 };
		const char *target, *state;
		struct udev_device *parent;

		if (!d || parse_sid(udev_device_get_sysname(d), &s.sid) < 0)
			continue;
		target = udev_device_get_sysattr_value(d, "targetname");
		if (!target || (iqn && strcasecmp(target, iqn)))
			continue;
		state = udev_device_get_sysattr_value(d, "state");
		snprintf(s.target, sizeof(s.target), "%s", target);
		snprintf(s.state, sizeof(s.state), "%s", state ? state : "");
		sysattr(d, "ifacename", s.iface, sizeof(s.iface));
		sysattr(d, "initiatorname", s.initiator, sizeof(s.initiator));
		session_address(s.sid, s.addr, sizeof(s.addr));
		r = append(&v->sessions, &v->nsessions, &s, sizeof(s));
		if (r < 0)
			return r;
		/* the class device sits below its transport device "sessionN", parent of the targets */
		parent = udev_device_get_parent(d);
		if (parent) {
			r = load_disks(udev, parent, s.sid, v);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

void iscsi_view_keep_iface(struct iscsi_view *v, const char *iface)
{
	size_t ns = 0, nd = 0;

	if (!iface)
		return;
	for (size_t i = 0; i < v->nsessions; i++) {
		const struct iscsi_session *s = &v->sessions[i];

		if (s->iface[0] && !streq(s->iface, iface)) {
			for (size_t j = 0; j < v->ndisks; j++)
				if (v->disks[j].sid == s->sid)
					v->disks[j].sid = -1; /* dropped below */
			continue;
		}
		v->sessions[ns++] = *s;
	}
	v->nsessions = ns;
	for (size_t j = 0; j < v->ndisks; j++)
		if (v->disks[j].sid >= 0)
			v->disks[nd++] = v->disks[j];
	v->ndisks = nd;
}

void iscsi_view_free(struct iscsi_view *v)
{
	free(v->sessions);
	free(v->disks);
	memset(v, 0, sizeof(*v));
}

static const struct iscsi_session *session_of(const struct iscsi_view *v, int sid)
{
	for (size_t i = 0; i < v->nsessions; i++)
		if (v->sessions[i].sid == sid)
			return &v->sessions[i];
	return NULL;
}

bool iscsi_view_logged_in(const struct iscsi_view *v)
{
	for (size_t i = 0; i < v->nsessions; i++)
		if (streq(v->sessions[i].state, "LOGGED_IN"))
			return true;
	return false;
}

const struct iscsi_disk *iscsi_view_lun(const struct iscsi_view *v, unsigned int lun)
{
	for (size_t i = 0; i < v->ndisks; i++) {
		const struct iscsi_disk *dk = &v->disks[i];
		const struct iscsi_session *s = session_of(v, dk->sid);
		char node[PATH_MAX];
		struct stat st;

		if (dk->lun != lun || !s || !streq(s->state, "LOGGED_IN"))
			continue;
		/* the node must be that disk (a stale /dev entry of a removed one is not) */
		snprintf(node, sizeof(node), "%s/%s", iscsi_dev_root(), dk->name);
		if (stat(node, &st) < 0 || !S_ISBLK(st.st_mode) || st.st_rdev != dk->devt)
			continue;
		return dk;
	}
	return NULL;
}

/* Is block device @devt active swap (/proc/swaps)?  1, 0. */
static int in_swap(dev_t devt)
{
	FILE *f = fopen("/proc/swaps", "re");
	char line[PATH_MAX + 128];
	int r = 0;

	if (!f)
		return 0;
	while (!r && fgets(line, sizeof(line), f)) {
		char *sp = strpbrk(line, " \t");
		struct stat st;

		if (line[0] != '/' || !sp)
			continue;
		*sp = '\0';
		/* (blanks are escaped as \040 there: such a name is no /dev node of a disk) */
		r = stat(line, &st) == 0 && S_ISBLK(st.st_mode) && st.st_rdev == devt;
	}
	fclose(f);
	return r;
}

/*
 * The exclusive-open probe: O_EXCL on a block device fails with EBUSY while
 * anything holds it or a partition of it (a mount in any mount namespace,
 * swap, device-mapper/LVM, md, another O_EXCL user).  Opened read-only and
 * closed at once (no udev change event); the probe itself holds the device
 * for those microseconds only.  1 busy, 0 free, <0 cannot tell.
 */
static int excl_busy(const struct iscsi_disk *dk)
{
	char node[PATH_MAX];
	struct stat st;
	int fd;

	snprintf(node, sizeof(node), "%s/%s", iscsi_dev_root(), dk->name);
	fd = open(node, O_RDONLY | O_EXCL | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return errno == EBUSY ? 1 : errno == ENOENT || errno == ENXIO ? 0 : NEG_ERRNO();
	if (fstat(fd, &st) < 0 || !S_ISBLK(st.st_mode) || st.st_rdev != dk->devt) {
		close(fd);
		return 0; /* not that disk (gone, replaced): says nothing about it */
	}
	close(fd);
	return 0;
}

int iscsi_disk_in_use(const struct iscsi_disk *dk, char *why, size_t len)
{
	_cleanup_(udev_unrefp) struct udev *udev = udev_new();
	_cleanup_(udev_device_unrefp) struct udev_device *d = NULL;
	_cleanup_(udev_enumerate_unrefp) struct udev_enumerate *e = NULL;
	struct udev_list_entry *le;
	char holders[PATH_MAX];
	int r = fv_mnt_count_devno(dk->devt);

	if (r < 0)
		return r;
	if (r > 0) {
		snprintf(why, len, "/dev/%s (LUN %u) is mounted", dk->name, dk->lun);
		return 1;
	}
	if (!udev)
		return -ENOMEM;
	d = udev_device_new_from_devnum(udev, 'b', dk->devt);
	if (!d)
		return 0; /* gone: not in use */
	snprintf(holders, sizeof(holders), "%s/holders", udev_device_get_syspath(d));
	if (fv_path_is_empty(holders) == 0) {
		snprintf(why, len, "/dev/%s (LUN %u) is held by another device", dk->name, dk->lun);
		return 1;
	}
	if (in_swap(dk->devt)) {
		snprintf(why, len, "/dev/%s (LUN %u) is swap", dk->name, dk->lun);
		return 1;
	}
	/* partitions: children of the disk, mounted or held (LVM, dm, md on a partition) */
	e = udev_enumerate_new(udev);
	if (!e || udev_enumerate_add_match_parent(e, d) < 0 ||
	    udev_enumerate_add_match_property(e, "DEVTYPE", "partition") < 0)
		return -ENOMEM;
	r = udev_enumerate_scan_devices(e);
	if (r < 0)
		return r;
	udev_list_entry_foreach(le, udev_enumerate_get_list_entry(e))
	{
		_cleanup_(udev_device_unrefp) struct udev_device *p =
			udev_device_new_from_syspath(udev, udev_list_entry_get_name(le));

		if (!p)
			continue;
		r = fv_mnt_count_devno(udev_device_get_devnum(p));
		if (r < 0)
			return r;
		if (r > 0) {
			snprintf(why, len, "/dev/%s (LUN %u) is mounted", udev_device_get_sysname(p),
				 dk->lun);
			return 1;
		}
		if (in_swap(udev_device_get_devnum(p))) {
			snprintf(why, len, "/dev/%s (a partition of LUN %u) is swap",
				 udev_device_get_sysname(p), dk->lun);
			return 1;
		}
		snprintf(holders, sizeof(holders), "%s/holders", udev_device_get_syspath(p));
		if (fv_path_is_empty(holders) == 0) {
			snprintf(why, len, "/dev/%s (a partition of LUN %u) is held by another device "
				 "(device-mapper, LVM, md)", udev_device_get_sysname(p), dk->lun);
			return 1;
		}
	}
	r = excl_busy(dk);
	if (r < 0)
		return r;
	if (r > 0) {
		snprintf(why, len, "/dev/%s (LUN %u) is held open exclusively (a mount in another "
			 "mount namespace, swap, device-mapper, or another program)", dk->name, dk->lun);
		return 1;
	}
	return 0;
}

int iscsi_release_decide(const struct iscsi_view *v, int lun, iscsi_in_use_fn in_use, void *arg,
			 char *why, size_t len)
{
	bool busy = false;

	why[0] = '\0';
	for (size_t i = 0; i < v->ndisks; i++) {
		char w[512];
		int r = in_use(&v->disks[i], arg, w, sizeof(w));

		if (r < 0)
			return r;
		if (r == 0)
			continue;
		if ((int)v->disks[i].lun == lun) {
			snprintf(why, len, "%s", w);
			return ISCSI_KEEP; /* this very LUN is in use: nothing to release */
		}
		if (!busy)
			snprintf(why, len, "%s", w);
		busy = true;
	}
	if (busy)
		return lun >= 0 ? ISCSI_DELETE_LUN : ISCSI_KEEP;
	return ISCSI_LOGOUT;
}

int iscsi_devt_target(dev_t devt, char *iqn, size_t len, unsigned int *lun)
{
	_cleanup_(udev_unrefp) struct udev *udev = udev_new();
	_cleanup_(udev_device_unrefp) struct udev_device *d = NULL, *cls = NULL;
	struct udev_device *sd, *p;
	const char *target;
	unsigned int h, c, t, l;
	int sid;
	char x;

	if (!udev)
		return 1;
	d = udev_device_new_from_devnum(udev, 'b', devt);
	if (!d)
		return 1;
	sd = udev_device_get_parent_with_subsystem_devtype(d, "scsi", "scsi_device");
	if (!sd || sscanf(udev_device_get_sysname(sd), "%u:%u:%u:%u%c", &h, &c, &t, &l, &x) != 4)
		return 1;
	for (p = udev_device_get_parent(sd); p; p = udev_device_get_parent(p))
		if (parse_sid(udev_device_get_sysname(p), &sid) == 0)
			break;
	if (!p)
		return 1;
	cls = udev_device_new_from_subsystem_sysname(udev, "iscsi_session",
						     udev_device_get_sysname(p));
	target = cls ? udev_device_get_sysattr_value(cls, "targetname") : NULL;
	if (!target)
		return 1;
	snprintf(iqn, len, "%s", target);
	*lun = l;
	return 0;
}

int iscsi_devt_health(dev_t devt, char *msg, size_t len)
{
	_cleanup_(udev_unrefp) struct udev *udev = udev_new();
	_cleanup_(udev_device_unrefp) struct udev_device *d = NULL, *cls = NULL;
	struct udev_device *sd, *p;
	const char *state, *target;
	char addr[PORTAL_MAX] = "";
	int sid;

	if (!udev)
		return -ENOMEM;
	d = udev_device_new_from_devnum(udev, 'b', devt);
	if (!d) {
		snprintf(msg, len, "the LUN's disk %u:%u is gone", major(devt), minor(devt));
		return 1;
	}
	sd = udev_device_get_parent_with_subsystem_devtype(d, "scsi", "scsi_device");
	for (p = sd ? udev_device_get_parent(sd) : NULL; p; p = udev_device_get_parent(p))
		if (parse_sid(udev_device_get_sysname(p), &sid) == 0)
			break;
	if (!p)
		return 0; /* no iSCSI disk: nothing of a session to say */
	cls = udev_device_new_from_subsystem_sysname(udev, "iscsi_session",
						     udev_device_get_sysname(p));
	state = cls ? udev_device_get_sysattr_value(cls, "state") : NULL;
	target = cls ? udev_device_get_sysattr_value(cls, "targetname") : NULL;
	session_address(sid, addr, sizeof(addr));
	/* LOGGED_IN; FAILED while the initiator tries to recover it; FREE when it is gone */
	if (!state || !streq(state, "LOGGED_IN")) {
		snprintf(msg, len, "the iSCSI session %d to %s%s%s is %s", sid,
			 target ? target : "its target", addr[0] ? " at " : "", addr,
			 state ? state : "gone");
		return 1;
	}
	/* the disk itself: running, or blocked / offline / transport-offline */
	state = udev_device_get_sysattr_value(sd, "state");
	if (state && !streq(state, "running")) {
		snprintf(msg, len, "the disk %s of session %d to %s is %s",
			 udev_device_get_sysname(d), sid, target ? target : "its target", state);
		return 1;
	}
	return 0;
}

/* udev: a disk whose scsi_device is H:C:T:<lun> under an iSCSI session to <iqn> */
bool iscsi_match_lun(struct udev_device *d, void *arg)
{
	const struct iscsi_lunmatch *m = arg;
	const char *type = udev_device_get_devtype(d);
	struct udev_device *sd, *p;
	unsigned int h, c, t, l;
	char x;

	if (!type || !streq(type, "disk"))
		return false;
	sd = udev_device_get_parent_with_subsystem_devtype(d, "scsi", "scsi_device");
	if (!sd || sscanf(udev_device_get_sysname(sd), "%u:%u:%u:%u%c", &h, &c, &t, &l, &x) != 4 ||
	    l != m->lun)
		return false;
	for (p = udev_device_get_parent(sd); p; p = udev_device_get_parent(p)) {
		const char *name = udev_device_get_sysname(p);
		char path[PATH_MAX], target[IQN_MAX + 32];
		int sid;

		if (parse_sid(name, &sid) < 0)
			continue;
		snprintf(path, sizeof(path), "%s/iscsi_session/%s/targetname",
			 udev_device_get_syspath(p), name);
		if (fv_read_line(path, target, sizeof(target)) <= 0 || strcasecmp(target, m->iqn))
			return false;
		if (!m->iface)
			return true;
		snprintf(path, sizeof(path), "%s/iscsi_session/%s/ifacename",
			 udev_device_get_syspath(p), name);
		/* (a kernel without the attribute: any session of the target) */
		return fv_read_line(path, target, sizeof(target)) <= 0 || streq(target, m->iface);
	}
	return false;
}

void iscsi_delete_disk(const struct iscsi_disk *dk)
{
	_cleanup_(udev_unrefp) struct udev *udev = udev_new();
	_cleanup_(udev_device_unrefp) struct udev_device *d = NULL;
	char path[PATH_MAX];
	int fd;

	d = udev ? udev_device_new_from_devnum(udev, 'b', dk->devt) : NULL;
	if (!d)
		return; /* gone already */
	snprintf(path, sizeof(path), "%s/device/delete", udev_device_get_syspath(d));
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "1", 1) != 1)
		fv_log("could not remove /dev/%s (LUN %u): %m", dk->name, dk->lun);
	else
		fv_log("removed /dev/%s (LUN %u); the session stays for other LUNs", dk->name,
		       dk->lun);
	if (fd >= 0)
		close(fd);
}

int iscsi_disk_rescan(dev_t devt, uint64_t *ret_bytes)
{
	_cleanup_(udev_unrefp) struct udev *udev = udev_new();
	_cleanup_(udev_device_unrefp) struct udev_device *d = NULL, *again = NULL;
	char path[PATH_MAX];
	const char *size;
	uint64_t sectors;
	int fd, r = 0;

	d = udev ? udev_device_new_from_devnum(udev, 'b', devt) : NULL;
	if (!d)
		return -ENODEV;
	snprintf(path, sizeof(path), "%s/device/rescan", udev_device_get_syspath(d));
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "1", 1) != 1)
		r = NEG_ERRNO();
	if (fd >= 0)
		close(fd);
	if (r < 0)
		return r;
	/* a fresh device object: libudev caches attribute values */
	again = udev_device_new_from_syspath(udev, udev_device_get_syspath(d));
	size = again ? udev_device_get_sysattr_value(again, "size") : NULL;
	if (!size || fv_parse_u64(size, &sectors) < 0)
		return -EIO;
	*ret_bytes = sectors * 512;
	return 0;
}
