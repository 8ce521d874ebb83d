# migrate/migrate.mk - flexvol-migrate: moves a bound FlexVolume PV of a flexvol driver to the
# CSI driver of the same backing and back, keeping its claim and its data (docs/migration.md).
# Included by the top Makefile.
#
#   make                     also builds $(O)/flexvol-migrate
#   make static-migrate      build/static/flexvol-migrate (migrate/static.mk)
#
# Its tests: tests/provisioner/migrate_cases.py (make check-provisioner, in make check),
# tests/kube/migrate-api.py (make check-migrate-api), the cluster lane's cases_csi.py (make
# check-kube-csi).  It links lib/ (the API client of the kube* group, the owner records of an
# nfs share for --root) and the op layer's helpers they use; no other program's files.

MIG_SRCS := $(sort $(wildcard migrate/*.c))
MIG_OBJS := $(patsubst %.c,$(O)/obj/%.o,$(MIG_SRCS))

all: $(O)/flexvol-migrate

$(O)/flexvol-migrate: $(MIG_OBJS) $(LIB_OBJS) $(LIB_KUBE_OBJS) $(CORE_OBJS)
	@[ -n "$(Q)" ] && echo "  LD      $@" || true
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(MIG_OBJS) $(LIB_OBJS) $(LIB_KUBE_OBJS) $(CORE_OBJS) \
		$(KUBE_LIBS) $(FV_LIBS)

-include $(MIG_OBJS:.o=.d)
