/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fencing of iSCSI LUNs with SCSI-3 persistent reservations (SPC-4 5.13,
 * docs/fencing.md): one writer across nodes.
 *
 * Each node registers its own reservation key on a LUN and holds a WRITE
 * EXCLUSIVE - REGISTRANTS ONLY reservation (type 5) while a read-write
 * filesystem of the LUN is mounted on it: the target then refuses writes
 * from every I_T nexus that is not registered, which is every other node.
 * Registrants only (not plain WRITE EXCLUSIVE): every session of the same
 * node (several portals) registers the same key and may write.  The key is
 * derived from the initiator name of the session (stable per node and per
 * iface, the identity the target sees), so it names the holder in a
 * Failure.  A node never registers while another key holds the
 * reservation: under type 5 a registrant may write.
 *
 * The commands go straight to the disk through SG_IO (PERSISTENT RESERVE
 * IN/OUT CDBs, each with a timeout), not through sg_persist: no new
 * package on the node or in the static image, no fork+exec per command,
 * and the SCSI status (RESERVATION CONFLICT) comes back as data rather
 * than as a parsed message.  The disk is opened read-only and O_NONBLOCK
 * (no udev change event on close, no wait on a missing medium): root may
 * send PERSISTENT RESERVE OUT that way (CAP_SYS_RAWIO).
 */
#include <fcntl.h>
#include <scsi/sg.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "iscsi.h"

#define PR_IN 0x5e
#define PR_OUT 0x5f
#define PR_IN_READ_KEYS 0x00
#define PR_IN_READ_RESERVATION 0x01
#define PR_OUT_REGISTER 0x00
#define PR_OUT_RESERVE 0x01
#define PR_OUT_RELEASE 0x02
#define PR_OUT_REGISTER_IGNORE 0x06
#define PR_TYPE_WE_RO 0x05
#define SAM_STAT_CHECK_CONDITION_ 0x02
#define SAM_STAT_RESERVATION_CONFLICT_ 0x18
#define PR_TIMEOUT_MS 30000

static void put_be64(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)(v & 0xff);
}

static uint64_t get_be64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static uint32_t get_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/*
 * One command.  0, -EBUSY (RESERVATION CONFLICT), -EOPNOTSUPP (ILLEGAL
 * REQUEST: the target does not implement it), -EIO (any other failure,
 * described in @why), or -errno of the ioctl.
 */
static int sg_cmd(int fd, unsigned char *cdb, int cdblen, int dir, void *buf, unsigned int len,
		  char *why, size_t whylen)
{
	unsigned char sense[64] = { 0 };
	struct sg_io_hdr io = {
		.interface_id = 'S',
		.dxfer_direction = dir,
		.cmd_len = (unsigned char)cdblen,
		.mx_sb_len = sizeof(sense),
		.dxfer_len = len,
		.dxferp = buf,
		.cmdp = cdb,
		.sbp = sense,
		.timeout = PR_TIMEOUT_MS,
	};
	int key;

	if (ioctl(fd, SG_IO, &io) < 0) {
		snprintf(why, whylen, "SG_IO: %s", strerror(errno));
		return NEG_ERRNO();
	}
	if (io.status == SAM_STAT_RESERVATION_CONFLICT_) {
		snprintf(why, whylen, "reservation conflict");
		return -EBUSY;
	}
	if (io.host_status || (io.driver_status & 0x0f & ~0x08) ||
	    (io.status && io.status != SAM_STAT_CHECK_CONDITION_)) {
		snprintf(why, whylen, "SCSI status 0x%02x, host 0x%02x, driver 0x%02x%s", io.status,
			 io.host_status, io.driver_status,
			 io.duration >= PR_TIMEOUT_MS ? " (timed out)" : "");
		return -EIO;
	}
	if (io.status == SAM_STAT_CHECK_CONDITION_ || io.sb_len_wr) {
		/* fixed (0x70/0x71) or descriptor (0x72/0x73) sense */
		key = (sense[0] & 0x7f) >= 0x72 ? sense[1] & 0x0f : sense[2] & 0x0f;
		if (key == 0x00 || key == 0x01)
			return 0; /* NO SENSE, RECOVERED ERROR */
		snprintf(why, whylen, "sense key 0x%x, ASC/ASCQ 0x%02x/0x%02x", key,
			 (sense[0] & 0x7f) >= 0x72 ? sense[2] : sense[12],
			 (sense[0] & 0x7f) >= 0x72 ? sense[3] : sense[13]);
		return key == 0x05 ? -EOPNOTSUPP : -EIO;
	}
	return 0;
}

static int pr_in(int fd, int sa, unsigned char *buf, unsigned int len, char *why, size_t whylen)
{
	unsigned char cdb[10] = { PR_IN, (unsigned char)sa, 0, 0, 0, 0, 0,
				  (unsigned char)(len >> 8), (unsigned char)len, 0 };

	memset(buf, 0, len);
	return sg_cmd(fd, cdb, sizeof(cdb), SG_DXFER_FROM_DEV, buf, len, why, whylen);
}

static int pr_out(int fd, int sa, uint64_t key, uint64_t sakey, char *why, size_t whylen)
{
	unsigned char cdb[10] = { PR_OUT, (unsigned char)sa, PR_TYPE_WE_RO, 0, 0, 0, 0, 0, 24, 0 };
	unsigned char param[24] = { 0 };

	put_be64(param, key);
	put_be64(param + 8, sakey);
	return sg_cmd(fd, cdb, sizeof(cdb), SG_DXFER_TO_DEV, param, sizeof(param), why, whylen);
}

/* The reservation: 1 (holder key, type) held, 0 none, <0. */
static int read_reservation(int fd, uint64_t *holder, int *type, char *why, size_t whylen)
{
	unsigned char buf[24];
	int r = pr_in(fd, PR_IN_READ_RESERVATION, buf, sizeof(buf), why, whylen);

	if (r < 0)
		return r;
	if (get_be32(buf + 4) < 16)
		return 0;
	*holder = get_be64(buf + 8);
	*type = buf[21] & 0x0f;
	return 1;
}

/* Is @key registered (through any I_T nexus)?  1, 0, <0. */
static int key_registered(int fd, uint64_t key, char *why, size_t whylen)
{
	unsigned char buf[8 + 8 * 64];
	uint32_t n;
	int r = pr_in(fd, PR_IN_READ_KEYS, buf, sizeof(buf), why, whylen);

	if (r < 0)
		return r;
	n = get_be32(buf + 4) / 8;
	if (n > 64)
		n = 64; /* more than 64 registrants: the rest are not read */
	for (uint32_t i = 0; i < n; i++)
		if (get_be64(buf + 8 + 8 * i) == key)
			return 1;
	return 0;
}

uint64_t iscsi_pr_key(const char *initiator)
{
	char buf[IQN_MAX + 64];
	uint64_t k;

	snprintf(buf, sizeof(buf), "flexvol-pr:%s", initiator);
	k = fv_hash64(buf);
	return k ? k : 1; /* 0 means "no key" in PERSISTENT RESERVE OUT */
}

/* The disk @dk's node, opened read-only and checked to be that very disk. */
static int open_disk(const struct iscsi_disk *dk, char *why, size_t whylen)
{
	char node[PATH_MAX];
	struct stat st;
	int fd;

	snprintf(node, sizeof(node), "%s/%s", iscsi_dev_root(), dk->name);
	fd = open(node, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		snprintf(why, whylen, "cannot open %s: %s", node, strerror(errno));
		return NEG_ERRNO();
	}
	if (fstat(fd, &st) < 0 || !S_ISBLK(st.st_mode) || st.st_rdev != dk->devt) {
		close(fd);
		snprintf(why, whylen, "%s is not the disk of LUN %u", node, dk->lun);
		return -ENODEV;
	}
	return fd;
}

int iscsi_pr_fence(const struct iscsi_disk *dk, uint64_t key, uint64_t *holder, char *why,
		   size_t whylen)
{
	_cleanup_close_ int fd = open_disk(dk, why, whylen);
	int type = 0, r;

	if (fd < 0)
		return fd;
	r = read_reservation(fd, holder, &type, why, whylen);
	if (r < 0)
		return r;
	if (r == 1 && *holder != key) {
		/*
		 * Another node's: never register under it (type 5 lets registrants
		 * write), and drop a registration of ours left by a killed call.
		 */
		char w2[128];

		if (key_registered(fd, key, w2, sizeof(w2)) == 1)
			(void)pr_out(fd, PR_OUT_REGISTER, key, 0, w2, sizeof(w2));
		return -EBUSY;
	}
	/*
	 * REGISTER AND IGNORE EXISTING KEY: the same call whether this nexus is
	 * registered or not (a retry, a second session of this node)
	 */
	type = r; /* 1: the reservation is ours already */
	r = pr_out(fd, PR_OUT_REGISTER_IGNORE, 0, key, why, whylen);
	if (r == -EOPNOTSUPP)
		r = pr_out(fd, PR_OUT_REGISTER, 0, key, why, whylen);
	if (r < 0 || type == 1)
		return r;
	r = pr_out(fd, PR_OUT_RESERVE, key, 0, why, whylen);
	if (r == -EBUSY) {
		char w2[128];

		/* another node reserved between our look and our reserve: go away again */
		if (read_reservation(fd, holder, &type, w2, sizeof(w2)) == 1 && *holder == key)
			return 0;
		(void)pr_out(fd, PR_OUT_REGISTER, key, 0, w2, sizeof(w2));
		if (read_reservation(fd, holder, &type, w2, sizeof(w2)) != 1)
			*holder = 0;
		return -EBUSY;
	}
	return r;
}

int iscsi_pr_unfence(const struct iscsi_disk *dk, uint64_t key, char *why, size_t whylen)
{
	_cleanup_close_ int fd = open_disk(dk, why, whylen);
	uint64_t holder = 0;
	int type = 0, r;

	if (fd < 0)
		return fd == -ENOENT || fd == -ENODEV ? 0 : fd; /* gone: nothing of it to release */
	r = read_reservation(fd, &holder, &type, why, whylen);
	if (r < 0)
		return r == -EOPNOTSUPP ? 0 : r; /* no PR at all: nothing was taken */
	if (r == 1 && holder == key) {
		r = pr_out(fd, PR_OUT_RELEASE, key, 0, why, whylen);
		if (r < 0)
			return r;
	}
	r = key_registered(fd, key, why, whylen);
	if (r <= 0)
		return r;
	/* unregister this nexus: REGISTER with our key and a service action key of 0 */
	r = pr_out(fd, PR_OUT_REGISTER, key, 0, why, whylen);
	return r == -EBUSY ? 0 : r; /* conflict: this nexus was not the registered one */
}
