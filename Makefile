# inferd: one build. The CPU engine always; the CUDA engine when nvcc is found.
#
#   make            build/inferd-run, build/inferd, build/inferd-mock-broker, the tools
#   make engine     only what needs no Kafka/systemd (inferd-run, the GPU tests): for tools/gpu-check
#   make test       every suite this machine can run; last line "N passed, N failed, N skipped"
#   make demo       the main job on the embedded defaults
#   make fuzz       the safetensors reader and the JPEG/PNG decode under libFuzzer (clang)
#   make deps       installs the Debian packages the build and tests need
#   make man        the man pages, in build/man (scdoc; make builds them too)
#   make install    the binaries, their man pages, the unit, the configs and the alert rules under PREFIX (/usr/local)
#   make deb        build/inferd_<VERSION>_amd64.deb, for `apt install ./build/inferd_*.deb`
#   make image      the OCI image inferd:<VERSION> from that package: build/image/oci, build/image/inferd_<VERSION>.tar
#
# Variables: CUDA_ARCH="90 80" (compute capabilities), NVCC=path or NVCC= to
# skip CUDA, WERROR= to drop -Werror, FUZZ_SECONDS=60.

# --- first pass: the packages, then this Makefile again --------------------
# The flags below come from pkg-config when the Makefile is read, so the
# packages must be there before it is read. Every goal therefore runs in two
# passes: this one installs what is missing (tools/install-deps: the build's
# packages for make/install/deb, everything for test/demo/fuzz), then runs make
# again, which reads the flags afresh. DEPS_PREFIX (tools/gpu-check's
# unpacked .debs) and clean install nothing.
ifndef INFERD_DEPS_READY
INSTALL_DEPS ?= tools/install-deps
GOALS     := $(or $(MAKECMDGOALS),all)
DEPS_KIND := $(if $(DEPS_PREFIX),,$(if $(filter test demo fuzz deps,$(GOALS)),all,$(if $(filter image,$(GOALS)),image,$(if $(filter-out clean cuda-status cuda-gencode,$(GOALS)),build))))
.PHONY: $(GOALS)
$(firstword $(GOALS)):
	@$(if $(DEPS_KIND),$(INSTALL_DEPS) $(DEPS_KIND))
	@$(if $(filter-out deps,$(GOALS)),$(MAKE) --no-print-directory INFERD_DEPS_READY=1 $(filter-out deps,$(GOALS)),:)
$(wordlist 2,$(words $(GOALS)),$(GOALS)):
	@:
else
# --- second pass: the build ---------------------------------------------------
BUILD     ?= build
CC        ?= cc
CFLAGS    ?= -O3 -g
WERROR    ?= -Werror
CUDA_ARCH ?= 90 80
FUZZ_SECONDS ?= 60
PREFIX    ?= /usr/local
# The one place the version is written: the mains print it (--version) and
# `make deb` names the package after it.
VERSION   := $(shell cat VERSION)

PKG_CONFIG ?= pkg-config
CORE_PKGS   := jansson openblas libcrypto libturbojpeg spng libdeflate libwebp
DAEMON_PKGS := rdkafka libsystemd libmicrohttpd libxcrypt
# Set DEPS_PREFIX to a folder of unpacked .deb files (tools/gpu-check) to build
# the engine where these Debian packages are not installed.
ifdef DEPS_PREFIX
CORE_CFLAGS := -I$(DEPS_PREFIX)/usr/include -I$(DEPS_PREFIX)/usr/include/x86_64-linux-gnu -I$(DEPS_PREFIX)/usr/include/x86_64-linux-gnu/openblas-pthread
CORE_LIBS   := -L$(DEPS_PREFIX)/usr/lib/x86_64-linux-gnu -L$(DEPS_PREFIX)/usr/lib/x86_64-linux-gnu/openblas-pthread \
               -Wl,-rpath,$(abspath $(DEPS_PREFIX))/usr/lib/x86_64-linux-gnu -Wl,-rpath,$(abspath $(DEPS_PREFIX))/usr/lib/x86_64-linux-gnu/openblas-pthread \
               -ljansson -lopenblas -lcrypto -lturbojpeg -lspng -ldeflate -lwebp -ldnnl
else
CORE_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(CORE_PKGS) 2>/dev/null)
CORE_LIBS   := $(shell $(PKG_CONFIG) --libs $(CORE_PKGS) 2>/dev/null)
endif
DAEMON_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(DAEMON_PKGS) 2>/dev/null) -I/usr/include/iniparser
DAEMON_LIBS   := $(shell $(PKG_CONFIG) --libs $(DAEMON_PKGS) 2>/dev/null) -liniparser
CUNIT_LIBS    := $(shell $(PKG_CONFIG) --libs cunit 2>/dev/null || echo -lcunit)

WARN     := -Wall -Wextra $(WERROR) -Wno-missing-field-initializers
ALL_CFLAGS = -std=gnu11 $(CFLAGS) $(WARN) -MMD -MP -D_GNU_SOURCE -Isrc $(CORE_CFLAGS)
# oneDNN (Debian's libdnnl-dev) ships no pkg-config file; its OpenMP
# runtime is GCC's libgomp (the CPU engine sets its thread count).
LDLIBS_CORE = $(CORE_LIBS) $(if $(DEPS_PREFIX),,-ldnnl) -lgomp -lpthread -lm

# --- CUDA detection -------------------------------------------------------
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
# The CUDA engine also needs cuBLASLt. CUBLAS_HOME points at a cuBLAS
# installed apart from the toolkit (include/cublasLt.h, lib/ or lib64/). By
# default it is the toolkit's own; where the toolkit has none (only nvcc and
# cudart, as on CI) it is CUBLAS_CI_HOME, cuBLASLt's header and NVIDIA's link
# stub that tools/fetch-cublas puts there (tools/install-deps runs it): the
# engine then compiles and links but can run no GEMM, which needs a GPU anyway.
# A machine with NVIDIA's driver (/dev/nvidiactl) never takes the stub: there
# the engine would reach cuBLASLt and fail. Without either, the build makes
# the CPU engine only, and says so.
# CUDA_HOME: nvcc's own folder as nvcc reports it (_HERE_), since the nvcc on
# PATH may be a wrapper script outside the toolkit.
CUBLAS_CI_HOME ?= /opt/cublas-ci
ifneq ($(strip $(NVCC)),)
CUDA_HOME  := $(or $(CUDA_HOME),$(patsubst %/bin,%,$(shell $(NVCC) --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^\#\$$ _HERE_=//p')),$(patsubst %/bin/nvcc,%,$(realpath $(NVCC))))
cublas_inc  = $(firstword $(wildcard $(1)/include/cublasLt.h $(1)/targets/x86_64-linux/include/cublasLt.h))
cublas_lib  = $(firstword $(wildcard $(1)/lib64/libcublasLt.so $(1)/lib/libcublasLt.so $(1)/targets/x86_64-linux/lib/libcublasLt.so))
CUBLAS_HOME := $(or $(CUBLAS_HOME),$(if $(and $(call cublas_inc,$(CUDA_HOME)),$(call cublas_lib,$(CUDA_HOME))),$(CUDA_HOME),$(if $(and $(wildcard $(CUBLAS_CI_HOME)/VERSION),$(if $(wildcard /dev/nvidiactl),,stub)),$(CUBLAS_CI_HOME),$(CUDA_HOME))))
CUBLAS_INC := $(call cublas_inc,$(CUBLAS_HOME))
CUBLAS_LIB := $(call cublas_lib,$(CUBLAS_HOME))
CUBLAS_STUB := $(if $(filter $(abspath $(CUBLAS_CI_HOME)),$(abspath $(CUBLAS_HOME))),$(CUBLAS_HOME))
ifeq ($(and $(CUBLAS_INC),$(CUBLAS_LIB)),)
NO_CUBLAS_NVCC := $(NVCC)
override NVCC :=
endif
endif
# SASS for every architecture of CUDA_ARCH, and PTX for the newest of them,
# so that a GPU newer than all of them (sm_100, say) JIT-compiles the PTX at
# load instead of failing at its first kernel; open checks that the device
# can load this build's code at all (cuda_kernels_loadable) and names
# CUDA_ARCH, which the build records, when it cannot.
CUDA_ARCH_NEWEST := $(lastword $(shell printf '%s\n' $(CUDA_ARCH) | sort -n))
CUDA_GENCODE := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
                -gencode arch=compute_$(CUDA_ARCH_NEWEST),code=compute_$(CUDA_ARCH_NEWEST)
ifneq ($(strip $(NVCC)),)
NVCCFLAGS  ?= -O3 -lineinfo
ALL_NVCCFLAGS = -std=c++17 $(NVCCFLAGS) $(CUDA_GENCODE) -DINFERD_CUDA_ARCH_LIST='"$(strip $(CUDA_ARCH))"' -Xcompiler -Wall,-Wextra$(if $(WERROR),$(comma)-Werror) -MMD -MP -Isrc -Icuda -I$(dir $(CUBLAS_INC)) $(CORE_CFLAGS)
CUDA_SRCS  := $(wildcard cuda/*.cu)
CUDA_OBJS  := $(CUDA_SRCS:%.cu=$(BUILD)/%.o)
CUDA_LIBS  := -L$(dir $(CUBLAS_LIB)) -Wl,-rpath,$(dir $(CUBLAS_LIB)) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
              -lcublasLt -lcudart_static -ldl -lrt -lstdc++
CUDA_NONE  :=
else
CUDA_OBJS  :=
CUDA_LIBS  :=
CUDA_NONE  := src/engine/engine_cuda_none.c
endif
comma := ,

# The build's configuration, kept in a stamp that changes only when it does:
# objects and archives depend on it, so switching CUDA on or off (or the
# architectures, or DEPS_PREFIX) rebuilds what it affects instead of linking a
# stale archive.
CONFIG_LINE  := NVCC=$(NVCC) CUBLAS=$(CUBLAS_INC) CUDA_ARCH=$(CUDA_ARCH) DEPS_PREFIX=$(DEPS_PREFIX) CFLAGS=$(CFLAGS) WERROR=$(WERROR)
CONFIG_STAMP := $(BUILD)/config.stamp
$(shell mkdir -p $(BUILD) && { echo '$(CONFIG_LINE)' | cmp -s - $(CONFIG_STAMP) || echo '$(CONFIG_LINE)' > $(CONFIG_STAMP); })

# --- sources ---------------------------------------------------------------
# One folder per layer; each uses only the layers listed before it.
#   src/core     safetensors, model, plan, records, labels, units, errbuf
#   src/engine   the engine interface, the CPU engine and its ops, the CUDA plan terms
#   src/decode   JPEG/PNG/WebP to 224x224 RGB8 (libjpeg-turbo, libspng, libdeflate, libwebp) and the resize; uses only src/core
#   cuda/        the CUDA engine (when nvcc is found)
#   src/config   the INI config (one table of keys) and the log (journald or plain lines)
#   src/http     the metrics and probe endpoint (libmicrohttpd), its auth, the exposition format
#   src/kafka    the consumer and producer (librdkafka): fetch sizes, security, transactions
#   src/pipeline records from Kafka to predictions: decode, batches, slots, produce, the DLQ
#   src/daemon   the service: its object and event loop, rebalances, transactions, reload, swap
#   src/cmd      the mains
# The core, decode and engine layers need no Kafka or systemd and make libinferd-core.a;
# config, http, kafka, pipeline and daemon (in that order, docs/architecture.md) make
# libinferd-daemon.a.
CORE_SRCS := $(wildcard src/core/*.c) $(wildcard src/decode/*.c) $(filter-out src/engine/engine_cuda_none.c,$(wildcard src/engine/*.c)) $(CUDA_NONE)
PROG_SRCS := $(wildcard src/cmd/*.c)
DAEMON_LAYERS := config http kafka pipeline daemon
DAEMON_SRCS := $(foreach l,$(DAEMON_LAYERS),$(wildcard src/$(l)/*.c))
TOOL_SRCS := $(wildcard tools/*.c)
UNIT_SRCS := $(wildcard tests/unit/*.c)
GPU_TEST_SRCS := $(wildcard tests/gpu/*.c)

CORE_OBJS   := $(CORE_SRCS:%.c=$(BUILD)/%.o) $(CUDA_OBJS)
DAEMON_OBJS := $(DAEMON_SRCS:%.c=$(BUILD)/%.o)
TOOLS       := $(patsubst tools/%.c,$(BUILD)/%,$(TOOL_SRCS))

PROGRAMS := $(BUILD)/inferd-run $(BUILD)/inferd $(TOOLS)
# Installed beside the programs as they are (tools/inferd-cutover: POSIX shell).
SCRIPTS  := tools/inferd-cutover
# What make install puts in $(PREFIX)/bin: every program but decode-bench, a
# benchmark of this build tree that tools/bench-decode runs from $(BUILD),
# and inferd-produce-record, the Kafka suite's producer of one record with
# headers too large for a command line.
INSTALL_PROGRAMS := $(filter-out $(BUILD)/decode-bench $(BUILD)/inferd-produce-record,$(PROGRAMS))

# The man pages, one for each installed program and inferd.ini(5). man/*.scd
# are scdoc's markup, built with scdoc (Debian's package), dated by the
# package's changelog as debhelper dates a build (SOURCE_DATE_EPOCH), so the
# same tree makes the same pages. man/inferd.ini.5 is roff that the key table
# makes (inferd --print-config-man); it is committed, and tests/unit (cfg_doc),
# tests/cli and tests/deb fail when it differs from what the binary prints.
SCDOC     ?= scdoc
MAN_SRCS  := $(wildcard man/*.scd)
MAN_PAGES := $(MAN_SRCS:man/%.scd=$(BUILD)/man/%) $(BUILD)/man/inferd.ini.5
MAN_EPOCH  = $(or $(SOURCE_DATE_EPOCH),$(shell dpkg-parsechangelog -l packaging/deb/changelog -STimestamp 2>/dev/null),0)
ENGINE_PROGRAMS := $(BUILD)/inferd-run $(if $(GPU_TEST_SRCS),$(BUILD)/tests/gpu-tests)

.PHONY: all engine man test unit demo fuzz deps clean install deb image cuda-status cuda-gencode
all: cuda-status $(PROGRAMS) $(BUILD)/tests/unit-tests $(if $(GPU_TEST_SRCS),$(BUILD)/tests/gpu-tests) man
man: $(MAN_PAGES)
engine: cuda-status $(ENGINE_PROGRAMS)

cuda-status:
ifneq ($(NO_CUBLAS_NVCC),)
	@echo "nvcc found ($(NO_CUBLAS_NVCC)) but not cuBLASLt (cublasLt.h and libcublasLt.so under $(CUBLAS_HOME); set CUBLAS_HOME), skipping CUDA: building the CPU engine only"
else ifeq ($(strip $(NVCC)),)
	@echo "nvcc not found, skipping CUDA: building the CPU engine only"
else
	@echo "nvcc found ($(NVCC)): building the CUDA engine for sm_$(subst $() $(),$(comma)sm_,$(strip $(CUDA_ARCH)))$(if $(CUBLAS_STUB), with cuBLASLt's link stub from $(CUBLAS_STUB) (tools/fetch-cublas): it compiles and links; no GEMM can run)"
endif

# The nvcc architecture flags, for tests/cuda_host (which checks the PTX is
# there on a kernel file it builds with them, cuBLASLt or not).
cuda-gencode:
	@echo $(CUDA_GENCODE)

$(BUILD)/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(if $(filter $(DAEMON_SRCS) $(PROG_SRCS) $(TOOL_SRCS) $(UNIT_SRCS),$<),$(DAEMON_CFLAGS)) -c $< -o $@

# Only the mains carry the version, so that a new VERSION rebuilds only them.
$(PROG_SRCS:%.c=$(BUILD)/%.o): VERSION
$(PROG_SRCS:%.c=$(BUILD)/%.o): ALL_CFLAGS += -DINFERD_VERSION='"$(VERSION)"'

$(BUILD)/%.o: %.cu $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(ALL_NVCCFLAGS) -c $< -o $@

# scdoc asks for no hyphenation (.nh) before .TH, whose macro turns it back
# on: the sed says it again after .TH, so that no option breaks at a line's end.
$(BUILD)/man/%: man/%.scd packaging/deb/changelog
	@mkdir -p $(dir $@)
	SOURCE_DATE_EPOCH=$(MAN_EPOCH) $(SCDOC) <$< >$@.tmp && sed -i '/^\.TH /a .nh' $@.tmp && mv $@.tmp $@

$(BUILD)/man/inferd.ini.5: man/inferd.ini.5
	@mkdir -p $(dir $@)
	cp $< $@

$(BUILD)/libinferd-core.a: $(CORE_OBJS) $(CONFIG_STAMP)
	@rm -f $@
	ar rcs $@ $(filter %.o,$^)

$(BUILD)/libinferd-daemon.a: $(DAEMON_OBJS) $(CONFIG_STAMP)
	@rm -f $@
	ar rcs $@ $(filter %.o,$^)

$(BUILD)/inferd-run: $(BUILD)/src/cmd/inferd_run.o $(BUILD)/libinferd-core.a
	$(CC) $(CFLAGS) -o $@ $^ $(CUDA_LIBS) $(LDLIBS_CORE)

$(BUILD)/inferd: $(BUILD)/src/cmd/inferd.o $(BUILD)/libinferd-daemon.a $(BUILD)/libinferd-core.a
	$(CC) $(CFLAGS) -o $@ $^ $(DAEMON_LIBS) $(CUDA_LIBS) $(LDLIBS_CORE)

$(BUILD)/%: $(BUILD)/tools/%.o $(BUILD)/libinferd-daemon.a $(BUILD)/libinferd-core.a
	$(CC) $(CFLAGS) -o $@ $^ $(DAEMON_LIBS) $(CUDA_LIBS) $(LDLIBS_CORE)

# One CUnit binary runs every tests/unit/test_<module>.c; the registry is
# generated from the file names, so a new suite needs no other edit.
$(BUILD)/tests/unit_registry.h: $(UNIT_SRCS)
	@mkdir -p $(dir $@)
	@{ for f in $(patsubst tests/unit/test_%.c,%,$(filter tests/unit/test_%.c,$(UNIT_SRCS))); do \
	     echo "UNIT_SUITE($$f)"; done; } > $@.tmp && mv $@.tmp $@

$(BUILD)/tests/unit/main.o: $(BUILD)/tests/unit_registry.h
$(BUILD)/tests/unit/%.o: ALL_CFLAGS += -I$(BUILD)/tests -Itests/unit

$(BUILD)/tests/unit-tests: $(UNIT_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/libinferd-daemon.a $(BUILD)/libinferd-core.a
	$(CC) $(CFLAGS) -o $@ $^ $(CUNIT_LIBS) $(DAEMON_LIBS) $(CUDA_LIBS) $(LDLIBS_CORE)

$(BUILD)/tests/gpu-tests: $(GPU_TEST_SRCS:%.c=$(BUILD)/%.o) $(CUDA_OBJS) $(BUILD)/libinferd-core.a
	$(CC) $(CFLAGS) -o $@ $^ $(CUDA_LIBS) $(LDLIBS_CORE)

test: all
	tests/run

demo: all
	tools/demo

# libFuzzer needs clang; each target links only the code it fuzzes (tools/fuzz).
fuzz:
	tools/fuzz $(FUZZ_SECONDS)

deps:
	@:

# The unit's /usr/local/bin becomes $(PREFIX)/bin; configs already under
# $(SYSCONFDIR)/inferd are never overwritten. systemd reads sysusers.d and
# tmpfiles.d only under /usr/lib and /etc, so with a PREFIX other than /usr
# they go under $(SYSCONFDIR). Without DESTDIR (a real install, as root) the
# user inferd and /var/lib/inferd are made at once; a staged install (DESTDIR,
# `make deb`) leaves that to whoever installs the tree (the package's postinst).
# The Prometheus alert rules are the package's data, not a conffile: they go
# under $(PREFIX)/share (replaced on upgrade); an operator who changes a
# threshold loads a copy from /etc/prometheus/ instead (see docs/operations.md, "Alerts").
SYSCONFDIR  ?= /etc
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSTEMD_LIB := $(if $(filter /usr,$(PREFIX)),/usr/lib,$(SYSCONFDIR))
SYSUSERSDIR ?= $(SYSTEMD_LIB)/sysusers.d
TMPFILESDIR ?= $(SYSTEMD_LIB)/tmpfiles.d
DOCDIR      ?= $(PREFIX)/share/doc/inferd
RULESDIR    ?= $(PREFIX)/share/inferd/prometheus
MANDIR      ?= $(PREFIX)/share/man
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/inferd \
		$(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(DOCDIR)/docs $(DESTDIR)$(RULESDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8
	install -m 0755 $(INSTALL_PROGRAMS) $(SCRIPTS) $(DESTDIR)$(PREFIX)/bin/
	@# Compressed as Debian ships them (gzip -9n: no name, no time stamp).
	@for p in $(MAN_PAGES); do t=$(DESTDIR)$(MANDIR)/man$${p##*.}/$${p##*/}.gz; \
		gzip -9n -c "$$p" >"$$t" && chmod 0644 "$$t" || exit 1; done
	sed 's|/usr/local/bin/|$(PREFIX)/bin/|g; s|/etc/inferd/|$(SYSCONFDIR)/inferd/|g; s|/usr/share/doc/inferd/|$(DOCDIR)/|g' \
		systemd/inferd@.service >$(DESTDIR)$(UNITDIR)/inferd@.service && chmod 0644 $(DESTDIR)$(UNITDIR)/inferd@.service
	install -m 0644 systemd/inferd.sysusers $(DESTDIR)$(SYSUSERSDIR)/inferd.conf
	install -m 0644 systemd/inferd.tmpfiles $(DESTDIR)$(TMPFILESDIR)/inferd.conf
	install -m 0644 README.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/docs/
	install -m 0644 etc/prometheus/inferd-alerts.yml $(DESTDIR)$(RULESDIR)/
	@for f in etc/inferd/*.ini; do t=$(DESTDIR)$(SYSCONFDIR)/inferd/$${f##*/}; \
		if [ -e "$$t" ]; then echo "kept $$t"; else install -m 0644 "$$f" "$$t" && echo "installed $$t"; fi; done
	@if [ -z "$(DESTDIR)" ] && command -v systemd-sysusers >/dev/null; then \
		systemd-sysusers $(SYSUSERSDIR)/inferd.conf && systemd-tmpfiles --create $(TMPFILESDIR)/inferd.conf && \
		echo "made the user inferd and /var/lib/inferd"; \
	fi

# The Debian package: `make install` staged under $(BUILD)/deb/root with the
# Debian paths, then packaging/deb/build adds the control files (Depends from
# dpkg-shlibdeps) and runs dpkg-deb. The install is a second make so that it
# stages exactly what `make install` installs.
DEB_ARCH := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
deb: all
	rm -rf $(BUILD)/deb
	$(MAKE) --no-print-directory -s install DESTDIR=$(abspath $(BUILD))/deb/debian/inferd PREFIX=/usr SYSCONFDIR=/etc \
		UNITDIR=/lib/systemd/system >/dev/null
	packaging/deb/build $(BUILD)/deb $(VERSION) $(DEB_ARCH) $(BUILD)/inferd_$(VERSION)_$(DEB_ARCH).deb

# The OCI image (packaging/image/build: mmdebstrap, umoci, skopeo; no
# registry). It installs the package that `make deb` makes. A CUDA build
# brings the libcublasLt.so.N it linked into the image; a build against
# cuBLASLt's link stub (CI: tools/fetch-cublas) cannot run a GEMM anywhere, so
# there the image gets a CPU-only package instead, built apart in
# $(IMAGE_DIR)/cpu (NVCC=), and says so: its label io.inferd.cublaslt is "none".
IMAGE_DIR := $(BUILD)/image
IMAGE_DEB := $(if $(CUBLAS_STUB),$(IMAGE_DIR)/cpu,$(BUILD))/inferd_$(VERSION)_$(DEB_ARCH).deb
image: $(if $(CUBLAS_STUB),,deb)
ifneq ($(CUBLAS_STUB),)
	@echo "image: cuBLASLt here is the link stub ($(CUBLAS_STUB)): the image gets a CPU-only build ($(IMAGE_DIR)/cpu)"
	$(MAKE) --no-print-directory BUILD=$(IMAGE_DIR)/cpu NVCC= deb
endif
	packaging/image/build $(IMAGE_DEB) $(VERSION) $(IMAGE_DIR) $(if $(and $(NVCC),$(if $(CUBLAS_STUB),,x)),$(CUBLAS_LIB))

clean:
	rm -rf $(BUILD)

# Keep the objects of tools/*.c, which make would otherwise delete as intermediates.
.SECONDARY:

# -type f: the staged package tree ($(BUILD)/deb) has folders named sysusers.d.
-include $(shell find $(BUILD) -name '*.d' -type f 2>/dev/null)
endif
