/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flexvol-provisioner's pure parts: the path pattern, the StorageClass
 * parameters, the PV's nfs options (checked by the nfs driver's own code),
 * and the confined directory operations on a scratch tree.
 */
#include <fcntl.h>
#include <json-c/json.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit.h"
#include "api.h"
#include "fv/ownerdir.h"
#include "fv/kubejson.h"
#include "fv/kube.h"
#include "params.h"
#include "queue.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static json_object *claim(void)
{
	return json_tokener_parse(
		"{\"metadata\":{\"name\":\"data\",\"namespace\":\"team-a\",\"uid\":\"u-1\","
		"\"labels\":{\"app\":\"pg\",\"bad\":\"\"},"
		"\"annotations\":{\"tier\":\"gold\",\"evil\":\"../x\",\"slash\":\"a/b\","
		"\"space\":\"a b\"}}}");
}

static int expand(const char *pattern, char *out, char *err)
{
	json_object *c = claim();
	int r = fvp_path_expand(pattern, c, "pvc-u-1", out, FVP_PATH_MAX + 1, err, FVP_ERR_MAX);

	json_object_put(c);
	return r;
}

TEST(pattern_default_and_variables)
{
	char out[FVP_PATH_MAX + 1], err[FVP_ERR_MAX];

	CHECK_INT(expand("${namespace}-${pvc}-${pv}", out, err), 0);
	CHECK_STR(out, "team-a-data-pvc-u-1");
	CHECK_INT(expand("${.PVC.namespace}/${.PVC.name}", out, err), 0);
	CHECK_STR(out, "team-a/data");
	CHECK_INT(expand("k8s/${.PVC.labels.app}/${.PVC.annotations.tier}_${pvc}.d", out, err), 0);
	CHECK_STR(out, "k8s/pg/gold_data.d");
	CHECK_INT(expand("fixed-name", out, err), 0);
	CHECK_STR(out, "fixed-name");
}

TEST(pattern_refusals)
{
	char out[FVP_PATH_MAX + 1], err[FVP_ERR_MAX], big[600];

	/* leaving the root, absolute, empty components, trailing slash */
	CHECK_INT(expand("../${pvc}", out, err), -EINVAL);
	CHECK_INT(expand("a/../${pvc}", out, err), -EINVAL);
	CHECK_INT(expand("./${pvc}", out, err), -EINVAL);
	CHECK_INT(expand("/abs/${pvc}", out, err), -EINVAL);
	CHECK_CONTAINS(err, "relative");
	CHECK_INT(expand("a//${pvc}", out, err), -EINVAL);
	CHECK_INT(expand("${pvc}/", out, err), -EINVAL);
	CHECK_INT(expand("", out, err), -EINVAL);
	/* values never bring '/', '..' pieces, spaces or emptiness */
	CHECK_INT(expand("${.PVC.annotations.evil}", out, err), -EINVAL);
	CHECK_CONTAINS(err, "../x");
	CHECK_INT(expand("${.PVC.annotations.slash}", out, err), -EINVAL);
	CHECK_INT(expand("${.PVC.annotations.space}", out, err), -EINVAL);
	CHECK_INT(expand("${.PVC.labels.bad}", out, err), -EINVAL);
	CHECK_INT(expand("x/${.PVC.labels.bad}/y", out, err), -EINVAL);
	/* missing keys and unknown variables are errors, not "" */
	CHECK_INT(expand("${.PVC.labels.nope}", out, err), -EINVAL);
	CHECK_CONTAINS(err, "no label 'nope'");
	CHECK_INT(expand("${.PVC.annotations.nope}", out, err), -EINVAL);
	CHECK_CONTAINS(err, "no annotation 'nope'");
	CHECK_INT(expand("${frobnicate}", out, err), -EINVAL);
	CHECK_CONTAINS(err, "unknown variable");
	CHECK_INT(expand("$pvc", out, err), -EINVAL);
	CHECK_INT(expand("${pvc", out, err), -EINVAL);
	/* characters the nfs driver's subPath check or a mount option would choke on */
	CHECK_INT(expand("a,b", out, err), -EINVAL);
	CHECK_INT(expand("a=b", out, err), -EINVAL);
	CHECK_INT(expand("a:b", out, err), -EINVAL);
	CHECK_INT(expand("a b", out, err), -EINVAL);
	CHECK_INT(expand("caf\xc3\xa9", out, err), -EINVAL);
	/* lengths: 255 per component */
	memset(big, 'a', 256);
	big[256] = '\0';
	CHECK_INT(expand(big, out, err), -ENAMETOOLONG);
	big[255] = '\0';
	CHECK_INT(expand(big, out, err), 0);
}

TEST(subpath_check)
{
	CHECK(fvp_check_subpath("a"));
	CHECK(fvp_check_subpath("a/b-c/d_e.f"));
	CHECK(!fvp_check_subpath(""));
	CHECK(!fvp_check_subpath(NULL));
	CHECK(!fvp_check_subpath("."));
	CHECK(!fvp_check_subpath(".."));
	CHECK(!fvp_check_subpath("a/.."));
	CHECK(!fvp_check_subpath("/a"));
	CHECK(!fvp_check_subpath("a/"));
	CHECK(!fvp_check_subpath("a//b"));
	CHECK(!fvp_check_subpath("a b"));
}

/* Kubernetes quantities in bytes, rounded up as Quantity.Value() (issue 24) */
TEST(quantity_as_the_api_reads_it)
{
	static const struct {
		const char *s;
		int r;
		uint64_t v;
	} t[] = {
		{ "1", 0, 1 },
		{ "100m", 0, 1 },
		{ "1500m", 0, 2 },
		{ "0.5", 0, 1 },
		{ ".5", 0, 1 },
		{ "1.5Mi", 0, 1572864 },
		{ "1.5k", 0, 1500 },
		{ "1e3", 0, 1000 },
		{ "1E", 0, 1000000000000000000ULL },
		{ "1e-3", 0, 1 },
		{ "1E-40", 0, 1 },
		{ "1n", 0, 1 },
		{ "0", 0, 0 },
		{ "+5", 0, 5 },
		{ "1Ei", 0, 1ULL << 60 },
		{ "15.5Ei", 0, 31ULL << 59 },
		{ "18446744073709551615", 0, UINT64_MAX },
		{ "18446744073709551616", -ERANGE, 0 },
		{ "16Ei", -ERANGE, 0 },
		{ "1e20", -ERANGE, 0 },
		{ "1000000000000000000000000000000000000000", -ERANGE, 0 },
		{ "", -EINVAL, 0 },
		{ "-5", -EINVAL, 0 },
		{ "m", -EINVAL, 0 },
		{ "1e", -EINVAL, 0 },
		{ "1ki", -EINVAL, 0 },
		{ "1 Gi", -EINVAL, 0 },
		{ "1..5", -EINVAL, 0 },
		{ "1e1000", -EINVAL, 0 },
	};

	for (size_t i = 0; i < ARRAY_SIZE(t); i++) {
		uint64_t v = 0;

		CHECK_INT(fv_quantity(t[i].s, &v), t[i].r);
		if (t[i].r == 0)
			CHECK_U64(v, t[i].v);
	}
	CHECK_INT(fv_quantity(NULL, &(uint64_t){ 0 }), -EINVAL);
}

static int class_parse(const char *json, struct fvp_class *c, char *err, json_object **keep)
{
	json_object *sc = json_tokener_parse(json);
	int r;

	if (!sc)
		return -999;
	r = fvp_class_parse(sc, c, err, FVP_ERR_MAX);
	*keep = sc; /* the class's strings are borrowed from it */
	return r;
}

#define SC(params) "{\"metadata\":{\"name\":\"nfs\"},\"provisioner\":\"flexvol/nfs\",\"parameters\":" params "}"

TEST(class_defaults)
{
	struct fvp_class c;
	char err[FVP_ERR_MAX];
	json_object *sc = NULL;

	REQUIRE_INT(class_parse(SC("{\"server\":\"nfs.example.com\",\"share\":\"/export\"}"), &c, err, &sc), 0);
	CHECK_STR(c.name, "nfs");
	CHECK_STR(c.path_pattern, "${namespace}-${pvc}-${pv}");
	CHECK_INT(c.on_delete, FVP_ARCHIVE);
	CHECK_INT(c.mode, 0777);
	CHECK(!c.has_uid && !c.has_gid && !c.read_only);
	CHECK(!c.nfs_version && !c.mount_options);
	CHECK_STR(c.reclaim_policy, "Delete");
	json_object_put(sc);
}

TEST(class_all_parameters)
{
	struct fvp_class c;
	char err[FVP_ERR_MAX];
	json_object *sc = NULL;

	REQUIRE_INT(class_parse("{\"metadata\":{\"name\":\"x\"},\"reclaimPolicy\":\"Retain\","
				"\"parameters\":{\"server\":\"[fd00::5]\",\"share\":\"/srv/k8s\","
				"\"pathPattern\":\"${namespace}/${pvc}\",\"onDelete\":\"delete\","
				"\"mode\":\"2770\",\"uid\":\"1000\",\"gid\":\"0\",\"nfsVersion\":\"4.2\","
				"\"mountOptions\":\"hard,timeo=600,nconnect=4\",\"readOnly\":\"true\"}}",
				&c, err, &sc),
		    0);
	CHECK_INT(c.on_delete, FVP_DELETE);
	CHECK_INT(c.mode, 02770);
	CHECK(c.has_uid && c.uid == 1000 && c.has_gid && c.gid == 0);
	CHECK_STR(c.nfs_version, "4.2");
	CHECK(c.read_only);
	CHECK_STR(c.reclaim_policy, "Retain");
	CHECK(!c.adopt_existing && !c.allow_unscoped);
	json_object_put(sc);
	REQUIRE_INT(class_parse("{\"parameters\":{\"server\":\"s\",\"share\":\"/x\","
				"\"pathPattern\":\"${.PVC.labels.app}/${pvc}\",\"adoptExisting\":\"true\","
				"\"allowUnscopedClaimValues\":\"true\"}}", &c, err, &sc),
		    0);
	CHECK(c.adopt_existing && c.allow_unscoped);
	json_object_put(sc);
	/* under the namespace, either spelling */
	REQUIRE_INT(class_parse("{\"parameters\":{\"server\":\"s\",\"share\":\"/x\","
				"\"pathPattern\":\"${.PVC.namespace}/${.PVC.annotations.t}\"}}", &c, err, &sc),
		    0);
	json_object_put(sc);
}

TEST(class_refusals)
{
	static const struct {
		const char *json, *why;
	} bad[] = {
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"size\":\"1\"}"), "unknown parameter 'size'" },
		{ SC("{\"share\":\"/x\"}"), "'server' is required" },
		{ SC("{\"server\":\"s\"}"), "'share' is required" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"onDelete\":\"Archive\"}"), "onDelete" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"mode\":\"0888\"}"), "mode" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"mode\":\"17777\"}"), "mode" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"mode\":\"\"}"), "mode" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"uid\":\"-1\"}"), "uid" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"uid\":\"4294967295\"}"), "uid" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"gid\":\"root\"}"), "gid" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"readOnly\":\"yes\"}"), "readOnly" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"pathPattern\":\"../up\"}"), "pathPattern" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"pathPattern\":\"a/./${pvc}\"}"), "'.'" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"pathPattern\":\"a//${pvc}\"}"), "empty" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"pathPattern\":\"${pvc}/..\"}"), "'..'" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"pathPattern\":\"${bogus}\"}"), "unknown variable" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"uid\":1}"), "not a string" },
		/* claim values outside ${namespace}/: refused without the opt-in */
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"pathPattern\":\"${.PVC.labels.a}\"}"),
		  "allowUnscopedClaimValues" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"pathPattern\":\"${namespace}-${.PVC.annotations.a}\"}"),
		  "does not start with the namespace" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"pathPattern\":\"x/${namespace}/${.PVC.labels.a}\"}"),
		  "does not start with the namespace" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"adoptExisting\":\"yes\"}"), "adoptExisting" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"allowUnscopedClaimValues\":\"1\"}"),
		  "allowUnscopedClaimValues" },
		{ "{\"reclaimPolicy\":\"Recycle\",\"parameters\":{\"server\":\"s\",\"share\":\"/x\"}}",
		  "reclaimPolicy" },
		/* the nfs driver's own checks, with its own words */
		{ SC("{\"server\":\"fd00::5\",\"share\":\"/x\"}"), "must be in brackets" },
		{ SC("{\"server\":\"-bad-\",\"share\":\"/x\"}"), "option 'server'" },
		{ SC("{\"server\":\"s\",\"share\":\"x\"}"), "option 'share'" },
		{ SC("{\"server\":\"s\",\"share\":\"/a/../b\"}"), "option 'share'" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"nfsVersion\":\"2\"}"), "nfsVersion" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"mountOptions\":\"vers=3\"}"), "nfsVersion" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"mountOptions\":\"suid\"}"), "not allowed" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"mountOptions\":\"hard,,soft\"}"), "empty entry" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"mountOptions\":\"timeo=abc\"}"), "bad value" },
		{ SC("{\"server\":\"s\",\"share\":\"/x\",\"mountOptions\":\"fsc\"}"), "allowed list" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct fvp_class c;
		char err[FVP_ERR_MAX] = "";
		json_object *sc = NULL;

		if (!CHECK_INT(class_parse(bad[i].json, &c, err, &sc), -EINVAL))
			fprintf(stderr, "  (case %zu: %s)\n", i, bad[i].json);
		if (!CHECK_CONTAINS(err, bad[i].why))
			fprintf(stderr, "  (case %zu)\n", i);
		json_object_put(sc);
	}
}

TEST(pv_options_through_the_driver)
{
	struct fvp_class c;
	char err[FVP_ERR_MAX];
	json_object *sc = NULL, *o = NULL;

	REQUIRE_INT(class_parse(SC("{\"server\":\"10.0.0.5\",\"share\":\"/export/\","
				   "\"nfsVersion\":\"3\",\"mountOptions\":\"soft\",\"readOnly\":\"true\"}"),
				&c, err, &sc),
		    0);
	REQUIRE_INT(fvp_pv_options(&c, "team-a/data", &o, err, sizeof(err)), 0);
	CHECK_STR(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN),
		  "{\"server\":\"10.0.0.5\",\"share\":\"\\/export\\/\",\"subPath\":\"team-a\\/data\","
		  "\"nfsVersion\":\"3\",\"mountOptions\":\"soft\"}");
	json_object_put(o);
	o = NULL;
	/* a subPath the driver refuses is refused here */
	CHECK_INT(fvp_pv_options(&c, "a/../b", &o, err, sizeof(err)), -EINVAL);
	CHECK_CONTAINS(err, "subPath");
	CHECK(!o);
	json_object_put(sc);
}

/* --- directories on a scratch tree --------------------------------------------------------- */

static char scratch[] = "/tmp/fvp-unit-XXXXXX";

/* A fresh tree per test, the previous one removed, the last one at exit. Whether one was made is
 * kept apart from the name: mkdtemp()'s random suffix ends in 'X' one time in 62, and reading the
 * name for it made the next mkdtemp() fail on a template that no longer ends in six Xs. */
static bool scratch_made;

static void scratch_remove(void)
{
	char cmd[128];

	if (!scratch_made)
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
	if (system(cmd) == 0)
		scratch_made = false;
	memcpy(scratch + sizeof(scratch) - 7, "XXXXXX", 6);
}

static int scratch_root(void)
{
	static bool registered;

	scratch_remove();
	if (scratch_made || !mkdtemp(scratch))
		return -1;
	scratch_made = true;
	if (!registered)
		registered = atexit(scratch_remove) == 0;
	return fv_ownerdir_root_open(scratch);
}

static bool exists(const char *rel)
{
	char p[512];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", scratch, rel);
	return lstat(p, &st) == 0;
}

static int mk(const char *rel)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", scratch, rel);
	return mkdir(p, 0755);
}

#define U1 "uid-1"
#define U2 "uid-2"

/* fv_ownerdir_make for claim @claim, no owner change, no adoption */
static int mkvol(int root, const char *rel, mode_t mode, const char *claim, enum fv_ownerdir_made *m)
{
	struct fv_owner o;
	char inside[256];

	return fv_ownerdir_make(root, rel, mode, (uid_t)-1, (gid_t)-1, claim, "pvc-x", 0, false, m, &o, inside,
			    sizeof(inside));
}

TEST(dir_make_idempotent_and_confined)
{
	int root = scratch_root();
	char p[512], out[512];
	struct stat st;
	enum fv_ownerdir_made m = FV_OWNERDIR_OURS;
	struct fv_owner o;

	REQUIRE(root >= 0);
	umask(022);
	if (mkvol(root, "probe", 0700, U1, NULL) == -ENOSYS)
		SKIP("openat2() is not available here (qemu-user)");
	CHECK_INT(mkvol(root, "a/b/c", 0770, U1, &m), 0);
	CHECK_INT(m, FV_OWNERDIR_NEW);
	snprintf(p, sizeof(p), "%s/a/b/c", scratch);
	CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0770);
	REQUIRE_INT(fv_ownerdir_owner(root, "a/b/c", &o), 0);
	CHECK_STR(o.claim, U1);
	CHECK_STR(o.name, "c");
	/* a second call for the same claim (a restart) keeps it and sets the mode again */
	chmod(p, 0700);
	CHECK_INT(mkvol(root, "a/b/c", 0770, U1, &m), 0);
	CHECK_INT(m, FV_OWNERDIR_OURS);
	CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0770);
	/* another claim: refused; a directory without a record: refused unless adopted */
	CHECK_INT(mkvol(root, "a/b/c", 0770, U2, &m), -FV_OWNERDIR_E_OWNED);
	REQUIRE_INT(mk("a/b/theirs"), 0);
	CHECK_INT(mkvol(root, "a/b/theirs", 0770, U1, &m), -FV_OWNERDIR_E_UNOWNED);
	CHECK_INT(fv_ownerdir_owner(root, "a/b/theirs", &o), -ENOENT);
	CHECK_INT(fv_ownerdir_make(root, "a/b/theirs", 0777, (uid_t)-1, (gid_t)-1, U1, "pvc-x", 0, true, &m,
			       &o, NULL, 0), 0);
	CHECK_INT(m, FV_OWNERDIR_ADOPTED);
	snprintf(p, sizeof(p), "%s/a/b/theirs", scratch);
	CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0755); /* as it was */
	/* inside another volume: refused; adopting a directory that holds volumes: refused */
	CHECK_INT(mkvol(root, "a/b/c/d", 0770, U2, &m), -FV_OWNERDIR_E_NESTED);
	CHECK(!exists("a/b/c/d"));
	CHECK_INT(fv_ownerdir_make(root, "a/b", 0777, (uid_t)-1, (gid_t)-1, U2, "pvc-y", 0, true, &m, &o,
			       NULL, 0), -FV_OWNERDIR_E_HOLDS);
	CHECK_INT(fv_ownerdir_owner(root, "a/b", &o), -ENOENT);
	/* a symlink in the way, as the last or an inner component: refused, nothing made outside */
	snprintf(p, sizeof(p), "%s/link", scratch);
	REQUIRE(symlink("/tmp", p) == 0);
	CHECK_INT(fv_ownerdir_make(root, "link", 0777, (uid_t)-1, (gid_t)-1, U1, "pvc-x", 0, true, &m, &o,
			       NULL, 0), -ENOTDIR);
	CHECK_INT(mkvol(root, "link/escaped", 0777, U1, NULL), -ENOTDIR);
	CHECK(access("/tmp/escaped", F_OK) != 0);
	/* archive: only by the owner; renamed next to itself, record gone; again: absent is fine */
	CHECK_INT(fv_ownerdir_archive(root, "a/b/c", U2, &o, out, sizeof(out)), -FV_OWNERDIR_E_OWNED);
	CHECK_STR(o.claim, U1);
	CHECK_INT(fv_ownerdir_archive(root, "a/b/c", U1, NULL, out, sizeof(out)), 0);
	CHECK_STR(out, "a/b/archived-c");
	CHECK(exists("a/b/archived-c") && !exists("a/b/c"));
	CHECK_INT(fv_ownerdir_owner(root, "a/b/c", &o), -ENOENT);
	CHECK_INT(fv_ownerdir_archive(root, "a/b/c", U1, NULL, out, sizeof(out)), 0);
	/* a taken archive name gets a stamp */
	CHECK_INT(mkvol(root, "a/b/c", 0770, U1, &m), 0);
	CHECK_INT(fv_ownerdir_archive(root, "a/b/c", U1, NULL, out, sizeof(out)), 0);
	CHECK_CONTAINS(out, "a/b/archived-c-");
	CHECK(!exists("a/b/c"));
	/* a directory without a record is never archived */
	REQUIRE_INT(mk("nobody"), 0);
	CHECK_INT(fv_ownerdir_archive(root, "nobody", U1, NULL, out, sizeof(out)), -FV_OWNERDIR_E_UNOWNED);
	CHECK(exists("nobody"));
	/* the archive never follows a symlink in the parents */
	CHECK_INT(fv_ownerdir_archive(root, "link/x", U1, NULL, out, sizeof(out)), -ENOTDIR);
	close(root);
}

TEST(archive_name_bounded)
{
	char name[256], out[300], out2[300];

	fv_ownerdir_archive_name("data", NULL, out, sizeof(out));
	CHECK_STR(out, "archived-data");
	fv_ownerdir_archive_name("data", "20260101T000000Z", out, sizeof(out));
	CHECK_STR(out, "archived-data-20260101T000000Z");
	memset(name, 'a', 255);
	name[255] = '\0';
	fv_ownerdir_archive_name(name, NULL, out, sizeof(out));
	CHECK_INT((int)strlen(out), 255);
	name[254] = 'b';
	fv_ownerdir_archive_name(name, NULL, out2, sizeof(out2));
	CHECK_INT((int)strlen(out2), 255);
	CHECK(strcmp(out, out2) != 0);
	fv_ownerdir_archive_name(name, "20260101T000000Z", out, sizeof(out));
	CHECK_INT((int)strlen(out), 255);
	CHECK_CONTAINS(out, "-20260101T000000Z");
	/* 246 bytes fit exactly */
	name[246] = '\0';
	fv_ownerdir_archive_name(name, NULL, out, sizeof(out));
	CHECK_INT((int)strlen(out), 255);
	CHECK(!strncmp(out + 9, name, 246));
}

TEST(dir_delete_never_follows)
{
	int root = scratch_root();
	char p[512], q[512];
	int fd;

	REQUIRE(root >= 0);
	if (mkvol(root, "probe", 0700, U1, NULL) == -ENOSYS)
		SKIP("openat2() is not available here (qemu-user)");
	/* outside/keep must survive: reached only through symlinks inside the tree */
	snprintf(q, sizeof(q), "%s/../fvp-outside-%d", scratch, (int)getpid());
	REQUIRE(mkdir(q, 0755) == 0);
	snprintf(p, sizeof(p), "%s/keep", q);
	fd = open(p, O_CREAT | O_WRONLY, 0644);
	REQUIRE(fd >= 0);
	close(fd);
	REQUIRE_INT(mkvol(root, "v", 0755, U1, NULL), 0);
	REQUIRE_INT(mk("v/d"), 0);
	snprintf(p, sizeof(p), "%s/v/d/out", scratch);
	REQUIRE(symlink(q, p) == 0);
	snprintf(p, sizeof(p), "%s/v/file", scratch);
	fd = open(p, O_CREAT | O_WRONLY, 0644);
	REQUIRE(fd >= 0);
	close(fd);
	CHECK_INT(fv_ownerdir_delete(root, "v", U2, NULL), -FV_OWNERDIR_E_OWNED);
	CHECK(exists("v/file"));
	CHECK_INT(fv_ownerdir_delete(root, "v", U1, NULL), 0);
	CHECK(!exists("v"));
	snprintf(p, sizeof(p), "%s/keep", q);
	CHECK(access(p, F_OK) == 0);
	/* absent: fine; remove_empty leaves a non-empty directory alone, and one without a record */
	CHECK_INT(fv_ownerdir_delete(root, "v", U1, NULL), 0);
	REQUIRE_INT(mkvol(root, "w", 0755, U1, NULL), 0);
	REQUIRE_INT(mkvol(root, "w/x", 0755, U1, NULL), -FV_OWNERDIR_E_NESTED); /* inside w */
	REQUIRE_INT(mk("w/x"), 0);
	CHECK_INT(fv_ownerdir_remove_empty(root, "w", U1, NULL), -ENOTEMPTY);
	CHECK_INT(fv_ownerdir_remove_empty(root, "w/x", U1, NULL), -FV_OWNERDIR_E_UNOWNED);
	CHECK(exists("w/x"));
	snprintf(p, sizeof(p), "%s/w/x", scratch);
	REQUIRE(rmdir(p) == 0);
	CHECK_INT(fv_ownerdir_remove_empty(root, "w", U1, NULL), 0);
	CHECK(!exists("w"));
	CHECK_INT(fv_ownerdir_owner(root, "w", &(struct fv_owner){ 0 }), -ENOENT);
	CHECK_INT(fv_ownerdir_remove_empty(root, "w", U1, NULL), 0);
	snprintf(p, sizeof(p), "rm -rf '%s' '%s'", q, scratch);
	CHECK_INT(system(p), 0);
	close(root);
}

/* migrate's handover: the record names another owner, its other fields kept; nothing else moves */
TEST(dir_transfer_moves_the_owner)
{
	int root = scratch_root();
	struct fv_owner o, other;
	char p[512];

	REQUIRE(root >= 0);
	if (mkvol(root, "probe", 0700, U1, NULL) == -ENOSYS)
		SKIP("openat2() is not available here (qemu-user)");
	REQUIRE_INT(mkvol(root, "v", 0755, U1, NULL), 0);
	CHECK_INT(fv_ownerdir_transfer(root, "v", U1, "v", NULL), 1);
	REQUIRE_INT(fv_ownerdir_owner(root, "v", &o), 0);
	CHECK_STR(o.claim, "v");
	CHECK_STR(o.pv, "pvc-x");
	CHECK_STR(o.name, "v");
	/* again: done already; from an owner it does not name: refused, unchanged */
	CHECK_INT(fv_ownerdir_transfer(root, "v", U1, "v", NULL), 0);
	CHECK_INT(fv_ownerdir_transfer(root, "v", U2, U1, &other), -FV_OWNERDIR_E_OWNED);
	CHECK_STR(other.claim, "v");
	/* what the new owner's rules then say: the old one is refused, the new one may delete */
	CHECK_INT(fv_ownerdir_delete(root, "v", U1, NULL), -FV_OWNERDIR_E_OWNED);
	CHECK_INT(fv_ownerdir_transfer(root, "v", "v", U1, NULL), 1);
	CHECK_INT(fv_ownerdir_delete(root, "v", "v", NULL), -FV_OWNERDIR_E_OWNED);
	CHECK_INT(fv_ownerdir_transfer(root, "v", U1, "v", NULL), 1);
	CHECK_INT(fv_ownerdir_delete(root, "v", "v", NULL), 0);
	/* no directory; a directory without a record; no temporary file left anywhere */
	CHECK_INT(fv_ownerdir_transfer(root, "v", U1, "v", NULL), -ENOENT);
	REQUIRE_INT(mk("bare"), 0);
	CHECK_INT(fv_ownerdir_transfer(root, "bare", U1, "bare", NULL), -FV_OWNERDIR_E_UNOWNED);
	snprintf(p, sizeof(p), "test -z \"$(ls -A '%s' | grep -v -x -e bare -e probe -e '.flexvol-owner-[0-9a-f]*')\"",
		 scratch);
	CHECK_INT(system(p), 0);
	snprintf(p, sizeof(p), "rm -rf '%s'", scratch);
	CHECK_INT(system(p), 0);
	close(root);
}

/* --- the work queue ---------------------------------------------------------------------- */

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

struct qt {
	pthread_mutex_t lock;
	unsigned int calls, running, max_running, fail_first;
	unsigned int hold_ms;	   /* each call takes this long */
	int last_value;		   /* the object's int */
	int retry_s;		   /* > 0: failures ask for this many seconds */
	uint64_t at[16];	   /* when each call started */
	bool same_key_twice;	   /* one key on two workers at once (must never happen) */
	char busy[8][16];
};

static int qt_work(void *ud, const char *key, int kind, bool deleted, json_object *obj)
{
	struct qt *t = ud;
	unsigned int n;

	(void)kind;
	(void)deleted;
	pthread_mutex_lock(&t->lock);
	n = t->calls++;
	if (n < ARRAY_SIZE(t->at))
		t->at[n] = mono_ms();
	t->last_value = json_object_get_int(obj);
	for (size_t i = 0; i < ARRAY_SIZE(t->busy); i++)
		if (streq(t->busy[i], key))
			t->same_key_twice = true;
	for (size_t i = 0; i < ARRAY_SIZE(t->busy); i++)
		if (!t->busy[i][0]) {
			snprintf(t->busy[i], sizeof(t->busy[i]), "%s", key);
			break;
		}
	if (++t->running > t->max_running)
		t->max_running = t->running;
	pthread_mutex_unlock(&t->lock);
	sleep_ms(t->hold_ms);
	pthread_mutex_lock(&t->lock);
	t->running--;
	for (size_t i = 0; i < ARRAY_SIZE(t->busy); i++)
		if (streq(t->busy[i], key)) {
			t->busy[i][0] = '\0';
			break;
		}
	pthread_mutex_unlock(&t->lock);
	if (n < t->fail_first)
		return t->retry_s > 0 ? t->retry_s : -EIO;
	return 0;
}

static unsigned int qt_calls(struct qt *t)
{
	unsigned int n;

	pthread_mutex_lock(&t->lock);
	n = t->calls;
	pthread_mutex_unlock(&t->lock);
	return n;
}

static bool qt_wait(struct qt *t, unsigned int calls, unsigned int timeout_ms)
{
	uint64_t end = mono_ms() + timeout_ms;

	while (qt_calls(t) < calls && mono_ms() < end)
		sleep_ms(5);
	return qt_calls(t) >= calls;
}

static struct fvp_queue *qt_queue(struct qt *t, unsigned int workers, unsigned int base_ms,
				  unsigned int max_ms)
{
	struct fvp_queue_config cfg = { .workers = workers, .base_ms = base_ms, .max_ms = max_ms,
					.fn = qt_work, .userdata = t };
	struct fvp_queue *q = NULL;

	pthread_mutex_init(&t->lock, NULL);
	return fvp_queue_new(&cfg, &q) == 0 ? q : NULL;
}

static void add_int(struct fvp_queue *q, const char *key, int v)
{
	json_object *o = json_object_new_int(v);

	fvp_queue_add(q, key, 0, false, o);
	json_object_put(o);
}

TEST(queue_backoff_doubles_to_the_cap)
{
	/* the library's 15 s .. 1000 s */
	CHECK_INT(fvp_backoff_ms(15000, 1000000, 1), 15000);
	CHECK_INT(fvp_backoff_ms(15000, 1000000, 2), 30000);
	CHECK_INT(fvp_backoff_ms(15000, 1000000, 5), 240000);
	CHECK_INT(fvp_backoff_ms(15000, 1000000, 7), 960000);
	CHECK_INT(fvp_backoff_ms(15000, 1000000, 8), 1000000);
	CHECK_INT(fvp_backoff_ms(15000, 1000000, 64), 1000000);
}

TEST(queue_one_key_one_worker_newest_object)
{
	struct qt t = { .hold_ms = 200 };
	struct fvp_queue *q = qt_queue(&t, 4, 50, 100);
	struct fvp_queue_stats st;

	REQUIRE(q);
	add_int(q, "pvc/a/x", 1);
	REQUIRE(qt_wait(&t, 1, 2000));
	/* five events while it runs: one more run, with the newest object, on one worker */
	for (int i = 2; i <= 6; i++)
		add_int(q, "pvc/a/x", i);
	REQUIRE(qt_wait(&t, 2, 2000));
	sleep_ms(400);
	CHECK_INT(qt_calls(&t), 2);
	CHECK_INT(t.last_value, 6);
	CHECK(!t.same_key_twice);
	fvp_queue_stats(q, &st);
	CHECK_INT(st.ready + st.delayed + st.running, 0);
	CHECK_INT(fvp_queue_failures(q, "pvc/a/x"), 0);
	fvp_queue_free(q);
}

TEST(queue_bounded_workers)
{
	struct qt t = { .hold_ms = 150 };
	struct fvp_queue *q = qt_queue(&t, 4, 50, 100);
	char key[32];
	uint64_t t0 = mono_ms();

	REQUIRE(q);
	for (int i = 0; i < 12; i++) {
		snprintf(key, sizeof(key), "pv/v%d", i);
		add_int(q, key, i);
	}
	REQUIRE(qt_wait(&t, 12, 5000));
	sleep_ms(200);
	/* 12 items of 150 ms on 4 workers: three rounds, never more than 4 at once */
	CHECK_INT(t.max_running, 4);
	CHECK(mono_ms() - t0 >= 450);
	fvp_queue_free(q);
}

TEST(queue_failures_back_off_then_forgotten)
{
	struct qt t = { .fail_first = 3 };
	struct fvp_queue *q = qt_queue(&t, 2, 200, 300);
	struct fvp_queue_stats st;

	REQUIRE(q);
	add_int(q, "pvc/ns/f", 1);
	REQUIRE(qt_wait(&t, 1, 1000));
	sleep_ms(20);
	CHECK_INT(fvp_queue_failures(q, "pvc/ns/f"), 1);
	REQUIRE(qt_wait(&t, 4, 3000));
	/* waits of 200, then 300 (400 capped), 300 (800 capped) ms; upper bounds loose (load) */
	CHECK(t.at[1] - t.at[0] >= 200);
	CHECK(t.at[2] - t.at[1] >= 300);
	CHECK(t.at[3] - t.at[2] >= 300 && t.at[3] - t.at[2] < 700);
	sleep_ms(50);
	CHECK_INT(fvp_queue_failures(q, "pvc/ns/f"), 0);
	fvp_queue_stats(q, &st);
	CHECK_INT(st.failed, 3);
	CHECK_INT(st.done, 1);
	CHECK_INT(st.delayed, 0);
	fvp_queue_free(q);
}

TEST(queue_event_ends_backoff_retry_after_wins)
{
	struct qt t = { .fail_first = 2 };
	struct fvp_queue *q = qt_queue(&t, 1, 60000, 60000);
	struct fvp_queue_stats st;

	REQUIRE(q);
	add_int(q, "pv/b", 1);
	REQUIRE(qt_wait(&t, 1, 1000));
	sleep_ms(20);
	fvp_queue_stats(q, &st);
	CHECK_INT(st.delayed, 1);
	/* a minute's backoff; a new event for the key runs it now, the failure count stays */
	add_int(q, "pv/b", 2);
	REQUIRE(qt_wait(&t, 2, 1000));
	sleep_ms(20);
	CHECK_INT(fvp_queue_failures(q, "pv/b"), 2);
	fvp_queue_free(q);

	/* a handler's "retry after N s" (Retry-After) replaces the exponential wait */
	memset(&t, 0, sizeof(t));
	t.fail_first = 1;
	t.retry_s = 1;
	q = qt_queue(&t, 1, 60000, 60000);
	REQUIRE(q);
	add_int(q, "pv/c", 1);
	REQUIRE(qt_wait(&t, 2, 3000));
	CHECK(t.at[1] - t.at[0] >= 1000 && t.at[1] - t.at[0] < 10000);
	fvp_queue_free(q);
}

/* api.c builds every request path: the exact paths the API server routes */
TEST(api_paths)
{
	char p[FVP_API_PATH_MAX];
	uint64_t q = 0;

	CHECK_STR(fvp_api_path(p, sizeof(p), FVP_API_PV, NULL, "pvc-1", NULL),
		  "/api/v1/persistentvolumes/pvc-1");
	CHECK_STR(fvp_api_path(p, sizeof(p), FVP_API_PV, NULL, NULL, NULL),
		  "/api/v1/persistentvolumes");
	CHECK_STR(fvp_api_path(p, sizeof(p), FVP_API_PVC, "team-a", "data", NULL),
		  "/api/v1/namespaces/team-a/persistentvolumeclaims/data");
	CHECK_STR(fvp_api_path(p, sizeof(p), FVP_API_PVC, "team-a", "data", "status"),
		  "/api/v1/namespaces/team-a/persistentvolumeclaims/data/status");
	CHECK_STR(fvp_api_path(p, sizeof(p), FVP_API_CLASS, NULL, "gold", NULL),
		  "/apis/storage.k8s.io/v1/storageclasses/gold");
	CHECK_STR(fvp_api_path(p, sizeof(p), FVP_API_NODE, NULL, "n1", NULL), "/api/v1/nodes/n1");
	CHECK_STR(fvp_api_path(p, sizeof(p), FVP_API_CONFIGMAP, "flexvol-loop", "n1", NULL),
		  "/api/v1/namespaces/flexvol-loop/configmaps/n1");
	CHECK_STR(fvp_api_path(p, sizeof(p), FVP_API_CONFIGMAP, "flexvol-loop", NULL, NULL),
		  "/api/v1/namespaces/flexvol-loop/configmaps");
	CHECK_STR(fvp_api_path(p, sizeof(p), FVP_API_EVENT, "team-a", NULL, NULL),
		  "/api/v1/namespaces/team-a/events");
	CHECK_STR(fvp_api_path(p, sizeof(p), FVP_API_LEASE, "kube-system", "flexvol-provisioner",
			       NULL),
		  "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/flexvol-provisioner");
	CHECK_STR(fvp_api_path(p, sizeof(p), FVP_API_LEASE, "kube-system", NULL, NULL),
		  "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases");
	CHECK_STR(fvp_api_select(p, sizeof(p), FVP_API_PV, "flexvol/node", "n1"),
		  "/api/v1/persistentvolumes?labelSelector=flexvol%2Fnode%3Dn1");
	CHECK_STR(fvp_api_select(p, sizeof(p), FVP_API_NODE, "kubernetes.io/hostname", "n1.x"),
		  "/api/v1/nodes?labelSelector=kubernetes.io%2Fhostname%3Dn1.x");
	/* cut as snprintf cuts, always terminated */
	CHECK_STR(fvp_api_path(p, 12, FVP_API_PV, NULL, "pvc-1", NULL), "/api/v1/per");
	CHECK_STR(fvp_api_select(p, 30, FVP_API_PV, "flexvol/node", "n1"),
		  "/api/v1/persistentvolumes");
	CHECK_STR(fvp_api_select(p, 50, FVP_API_PV, "flexvol/node", "n1"),
		  "/api/v1/persistentvolumes?labelSelector=flexvol");
	CHECK_INT(fv_quantity("2Mi", &q), 0);
	CHECK_U64(q, 2u << 20);
	CHECK_INT(fv_quantity("", &q), -EINVAL);
	CHECK_INT(fv_quantity(NULL, &q), -EINVAL);
}

struct items {
	unsigned int n;
	char names[8][16];
};

static int collect(void *ud, json_object *item)
{
	struct items *it = ud;
	const char *name = fv_json_str_in(item, "metadata", "name");

	if (it->n < 8)
		snprintf(it->names[it->n], sizeof(it->names[0]), "%s", name ? name : "?");
	it->n++;
	return 0;
}

/* A list body fed in pieces of @piece bytes: its items to @it, the rest returned. */
static json_object *decode_list(const char *body, size_t piece, struct items *it, int *r)
{
	struct fv_kube_listdec *d = fv_kube_listdec_new(collect, it);
	size_t n = strlen(body);
	json_object *rest;

	*r = 0;
	memset(it, 0, sizeof(*it));
	for (size_t off = 0; off < n && *r == 0; off += piece)
		*r = fv_kube_listdec_feed(d, body + off, n - off < piece ? n - off : piece);
	rest = fv_kube_listdec_finish(d);
	fv_kube_listdec_free(d);
	return rest;
}

TEST(list_decoded_item_by_item)
{
	static const char list[] =
		"{\"kind\":\"PersistentVolumeClaimList\",\"apiVersion\":\"v1\",\"metadata\":"
		"{\"resourceVersion\":\"42\",\"continue\":\"abc\"},\"items\":[{\"metadata\":"
		"{\"name\":\"a\",\"annotations\":{\"x\":\"],}{\\\"items\\\":[\"}}},\n {\"metadata\":"
		"{\"name\":\"b\"},\"spec\":{\"items\":[1,2,{\"items\":[]}]}}]}";
	struct items it;
	json_object *rest;
	int r;

	/* every cut gives the same: two items, the rest with the metadata and no items */
	for (size_t piece = 1; piece <= sizeof(list); piece += 7) {
		rest = decode_list(list, piece, &it, &r);
		CHECK_INT(r, 0);
		CHECK_INT((int)it.n, 2);
		CHECK_STR(it.names[0], "a");
		CHECK_STR(it.names[1], "b");
		CHECK_STR(fv_json_str_in(rest, "metadata", "resourceVersion"), "42");
		CHECK_STR(fv_json_str_in(rest, "metadata", "continue"), "abc");
		CHECK_INT((int)json_object_array_length(fv_json_get(rest, "items")), 0);
		json_object_put(rest);
	}
	/* an empty list; a Status (an error answer); an escaped member name still hands items over */
	rest = decode_list("{\"items\":[ ],\"metadata\":{}}", 3, &it, &r);
	CHECK_INT((int)it.n, 0);
	CHECK(rest != NULL);
	json_object_put(rest);
	rest = decode_list("{\"kind\":\"Status\",\"code\":410,\"message\":\"too old\"}", 5, &it, &r);
	CHECK_STR(fv_json_str(rest, "message"), "too old");
	json_object_put(rest);
	rest = decode_list("{\"\\u0069tems\":[{\"metadata\":{\"name\":\"c\"}}]}", 4, &it, &r);
	CHECK_INT((int)it.n, 1);
	CHECK_STR(it.names[0], "c");
	json_object_put(rest);
	/* not JSON, a cut body, an item that is no object: refused, never half taken */
	rest = decode_list("{\"items\":[{\"metadata\":}]}", 2, &it, &r);
	CHECK(r < 0 && rest == NULL);
	rest = decode_list("{\"items\":[{\"metadata\":{\"name\":\"d\"}}", 2, &it, &r);
	CHECK(rest == NULL);
	rest = decode_list("{\"items\":[1]}", 2, &it, &r);
	CHECK(r < 0 && rest == NULL);
}
