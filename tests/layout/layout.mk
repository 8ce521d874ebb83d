# tests/layout/layout.mk - the layout check (docs/design.md, "Layout").
# Included by the top Makefile.
#
#   make check-layout    file and function sizes, private headers, include
#                        direction, exported names' prefixes (tests/layout/check)

.PHONY: check-layout

check-layout:
	$(Q)python3 tests/layout/check
