# xdc — top-level build (GNU make).
#
#   make            build every library, build/xdc, the test binary and bench_gpu (its modes are tested on the CPU)
#   make check      build, run the unit tier in parallel (tests/<library>/; about 2 minutes on 2 cores)
#   make test       install missing Debian packages, build, run the whole suite: the unit tier, then the
#                   end-to-end tier (tests/e2e/) (last line: N passed, N failed, N skipped)
#   make test SAN=address,undefined     the same under sanitizers (objects in build/san)
#   make test T='NAME...'               the tests whose names contain one of the substrings
#   make demo       the default one-machine demo
#   make demo-multihost   the demo with each region on a network host of its own (root: namespaces, the
#                   netns WAN emulator, agents started one by one through examples/launch/ssh.sh)
#   make lint       format check (.clang-format), layer check, no symbol cycle among the orchestrator's objects,
#                   no positional *_INIT macros; make format fixes the first
#   make deps       install the Debian packages the project needs (root), or print the apt-get line (exit 69),
#                   and the PyTorch venv XDC_TORCH_VENV (default ~/.cache/xdc/torch-venv) of the xdc.torch tests
#   make CUDA=0     CPU-only build even where nvcc exists
#   make fuzz-NAME [FUZZ_SECONDS=300]   libFuzzer run of tests/fuzz/fuzz_NAME.c (clang)
#   make bench-NAME                     build bench/NAME/*.c and run bench/NAME/run.sh
#   make install [PREFIX=/usr/local]    install libxdc.so, include/xdc.h and xdc.pc (pkg-config; docs/api.md)
#   make gpu-bundle                     build/gpu-bundle: xdc, tests, bench_gpu, libxdc and xdc.torch, their libraries, for the GPU machine (docs/device.md)
#
# One static library per folder (subfolders such as wan/emu and orchestrator/cli are libraries of their
# own). LAYERS lists them from the top of the dependency graph to the bottom; the link line follows it,
# so a lower layer that calls up into a higher one fails to link (docs/design.md writes the rule down,
# tests/check_layers.sh checks the includes against the same table).

LAYERS := orchestrator/cli orchestrator/api orchestrator/doctor orchestrator/worker orchestrator/member orchestrator/launch orchestrator/elastic \
          orchestrator/runcfg orchestrator/rdzv orchestrator/obs scheduler sync model \
          intra wan/emu wan compression topology config kernels common
MAIN_SRC := orchestrator/cli/xdc_main.c

# Short build lines; `make V=1` shows the full commands.
V ?= 0
ifeq ($(V),1)
Q :=
say = @true
else
Q := @
say = @printf '  %-6s %s\n' $(1) $(2)
endif

BUILD ?= build
OPT ?= -O2
SAN ?=
ifneq ($(SAN),)
BUILD := build/san
SANFLAGS := -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

CC ?= cc
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-error=deprecated-declarations -Wno-format-truncation \
               -g $(OPT) -march=native -pthread -fPIC -I. -Iinclude -MMD -MP
CFLAGS_ALL = $(CFLAGS_BASE) $(SANFLAGS) $(EXTRA_CFLAGS) $(CUDA_CFLAGS) -DXDC_BIN_PATH='"$(BUILD)/xdc"'
LDLIBS := -lssl -lcrypto -lzstd -lyaml -ljansson -lxxhash -lopenblas -lmicrohttpd -lcurl -lm -pthread

# ---- CUDA / NCCL: compiled and linked wherever nvcc is found; skipped with one line otherwise -------
NVCC ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
ifeq ($(NVCC),)
CUDA ?= 0
CUDA_WHY := nvcc not found
else
CUDA ?= 1
CUDA_WHY := CUDA=0
endif
ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_CFLAGS := -DXDC_HAVE_CUDA=1 -DXDC_HAVE_NCCL=1 -I$(CUDA_HOME)/include
NVFLAGS := -O3 -std=c++17 -I. -arch=sm_90 -Xcompiler -Wall,-Wextra,-fPIC -DXDC_HAVE_CUDA=1 -DXDC_HAVE_NCCL=1 -MMD -MP
LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lnccl -lcudart -lstdc++
CU_SRCS := $(foreach l,$(LAYERS),$(wildcard $(l)/*.cu))
else
ifeq ($(filter deps clean libxdc-sources,$(MAKECMDGOALS)),)
$(info xdc: $(CUDA_WHY): GPU targets (CUDA kernels, NCCL backend) skipped; building CPU-only)
endif
CU_SRCS :=
endif

# ---- sources ---------------------------------------------------------------------------------------
obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
cuobj = $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(1))
lib_srcs = $(filter-out $(MAIN_SRC),$(wildcard $(1)/*.c))
lib_objs = $(call obj,$(call lib_srcs,$(1))) $(if $(filter 1,$(CUDA)),$(call cuobj,$(wildcard $(1)/*.cu)))
lib_file = $(BUILD)/libxdc_$(subst /,_,$(1)).a
LIB_FILES := $(foreach l,$(LAYERS),$(call lib_file,$(l)))

# The test binary: the runner and the fixtures shared across folders (tests/*.c), each library's tests
# and a folder's own fixtures (tests/<library>/test_*.c), the end-to-end tests (tests/e2e/test_*.c) and
# the fuzz targets' replays. tests/sync_standalone.c is a program of its own (below).
SYNC_STANDALONE_SRC := tests/sync_standalone.c
TEST_SRCS := $(filter-out $(SYNC_STANDALONE_SRC),$(wildcard tests/*.c) $(wildcard tests/*/test_*.c) $(wildcard tests/fuzz/*.c))
TEST_OBJS := $(call obj,$(TEST_SRCS))

# test_api.c builds programs against the installed libxdc with the sanitizers the library was built with.
$(BUILD)/obj/tests/e2e/test_api.o: EXTRA_CFLAGS += -DXDC_TEST_SAN='"$(SAN)"'

# Numeric folders get -O3 so the vectoriser does its work on the kernels.
$(BUILD)/obj/kernels/%.o $(BUILD)/obj/compression/%.o $(BUILD)/obj/model/%.o $(BUILD)/obj/intra/intra_reduce.o: OPT := -O3

.PHONY: all libs check test test-run demo demo-multihost deps deps-debian deps-bench clean check-layers lint format
all: $(BUILD)/xdc $(BUILD)/xdc_tests $(BUILD)/xdc_sync_standalone $(BUILD)/libxdc.so $(BUILD)/bench_gpu
libs: $(LIB_FILES)

# Objects depend on the flags they were built with: changed flags (-fPIC, CUDA on or off) rebuild them all,
# instead of linking objects of the old flags (libxdc.so cannot take objects built without -fPIC).
FLAGS_STAMP := $(BUILD)/obj/.flags-$(shell printf '%s\n' "$(subst ",,$(subst ',,$(CFLAGS_ALL) $(NVFLAGS)))" | cksum | cut -d' ' -f1)
$(FLAGS_STAMP):
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/obj/.flags-*
	@touch $@

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(call say,NVCC,$<)
	$(Q)$(NVCC) $(NVFLAGS) -c $< -o $@

define lib_rule
$(call lib_file,$(1)): $(call lib_objs,$(1))
	@mkdir -p $$(dir $$@)
	@rm -f $$@
	$$(call say,AR,$$@)
	$(Q)ar rcs $$@ $$^
endef
$(foreach l,$(LAYERS),$(eval $(call lib_rule,$(l))))

# Archives on the link line in layer order, top first: a symbol may only be resolved downwards.
$(BUILD)/xdc: $(call obj,$(MAIN_SRC)) $(LIB_FILES)
	$(call say,LINK,$@)
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $< $(LIB_FILES) $(LDLIBS)

$(BUILD)/xdc_tests: $(TEST_OBJS) $(LIB_FILES)
	$(call say,LINK,$@)
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $(TEST_OBJS) $(LIB_FILES) $(LDLIBS)

# The sync used as a library: linked against sync/ and the layers below it only, so a dependency on the
# orchestrator, model, scheduler, topology or config layers fails to link (test sync_standalone_*).
SYNC_STANDALONE_LIBS := $(foreach l,sync intra wan compression kernels common,$(call lib_file,$(l)))
$(BUILD)/xdc_sync_standalone: $(call obj,$(SYNC_STANDALONE_SRC)) $(SYNC_STANDALONE_LIBS)
	$(call say,LINK,$@)
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $< $(SYNC_STANDALONE_LIBS) $(LDLIBS)

# ---- libxdc: the C API (include/xdc.h) as a shared library -----------------------------------------
# Every object is built -fPIC, so the archives link into it as they are; orchestrator/api whole, the layers
# below as it needs them. The version script exports the calls of xdc.h and hides everything else.
API_MAJOR := $(shell sed -n 's/^\#define XDC_API_VERSION_MAJOR *\([0-9]*\).*/\1/p' include/xdc.h)
API_MINOR := $(shell sed -n 's/^\#define XDC_API_VERSION_MINOR *\([0-9]*\).*/\1/p' include/xdc.h)
$(BUILD)/libxdc.so: $(LIB_FILES) orchestrator/api/libxdc.map
	$(call say,LINK,$@)
	$(Q)$(CC) $(CFLAGS_ALL) -shared -Wl,-soname,libxdc.so.$(API_MAJOR) -Wl,--version-script=orchestrator/api/libxdc.map \
		-o $@ -Wl,--whole-archive $(call lib_file,orchestrator/api) -Wl,--no-whole-archive $(LIB_FILES) $(LDLIBS)

# The files `make $(BUILD)/libxdc.so` reads, one a line: what python/setup.py copies into the Python sdist.
.PHONY: libxdc-sources
libxdc-sources:
	@printf '%s\n' Makefile orchestrator/api/libxdc.map include/xdc.h \
		$(foreach l,$(LAYERS),$(wildcard $(l)/*.c $(l)/*.h $(l)/*.cu $(l)/*.cuh))

PREFIX ?= /usr/local
.PHONY: install
install: $(BUILD)/libxdc.so
	@install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	@install -m 0755 $(BUILD)/libxdc.so $(DESTDIR)$(PREFIX)/lib/libxdc.so.$(API_MAJOR).$(API_MINOR)
	@ln -sf libxdc.so.$(API_MAJOR).$(API_MINOR) $(DESTDIR)$(PREFIX)/lib/libxdc.so.$(API_MAJOR)
	@ln -sf libxdc.so.$(API_MAJOR) $(DESTDIR)$(PREFIX)/lib/libxdc.so
	@install -m 0644 include/xdc.h $(DESTDIR)$(PREFIX)/include/xdc.h
	@sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(API_MAJOR).$(API_MINOR)|' orchestrator/api/xdc.pc.in \
		> $(DESTDIR)$(PREFIX)/lib/pkgconfig/xdc.pc
	@echo "installed libxdc $(API_MAJOR).$(API_MINOR) in $(DESTDIR)$(PREFIX)"

# ---- tests -----------------------------------------------------------------------------------------
# Two tiers (docs/design.md, "Tests"): unit tests in tests/<library>/, end-to-end tests in tests/e2e/.
# TEST_JOBS tests run at once, at most TEST_E2E_JOBS of them end-to-end; the runner runs each serial
# test (XDC_TEST_SERIAL: namespaces, Slurm, etcd, fixed ports) alone.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
TEST_E2E_JOBS ?= $(TEST_JOBS)
TEST_ENV = XDC_BIN=$(BUILD)/xdc XDC_TORCH_VENV=$(XDC_TORCH_VENV)
check: all
	@$(TEST_ENV) $(BUILD)/xdc_tests -j $(TEST_JOBS) --tier unit $(T)

test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory test-run

test-run:
	@$(TEST_ENV) $(BUILD)/xdc_tests -j $(TEST_JOBS) --e2e-jobs $(TEST_E2E_JOBS) $(T)

# ---- demo ------------------------------------------------------------------------------------------
demo: deps-debian
	@$(MAKE) --no-print-directory $(BUILD)/xdc
	@bash examples/demo.sh $(BUILD)/xdc

demo-multihost: deps-debian
	@$(MAKE) --no-print-directory $(BUILD)/xdc
	@XDC=$(BUILD)/xdc bash examples/launch/netns.sh run examples/topology/multihost-2region.yaml \
		examples/train/demo.yaml runs/multihost-$$(date +%s)

# ---- fuzzing (clang, libFuzzer) --------------------------------------------------------------------
FUZZ_SECONDS ?= 300
FUZZ_BUILD := build/fuzz
fuzz-%:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang CUDA=0 OPT=-O1 \
		EXTRA_CFLAGS="-fsanitize=fuzzer-no-link,address -Wno-unused-command-line-argument -Wno-unknown-warning-option" libs
	clang -std=c11 -D_GNU_SOURCE -I. -g -O1 -fsanitize=fuzzer,address -DXDC_LIBFUZZER \
		-o $(FUZZ_BUILD)/fuzz_$* tests/fuzz/fuzz_$*.c $(foreach l,$(LAYERS),$(FUZZ_BUILD)/libxdc_$(subst /,_,$(l)).a) \
		$(filter-out -L% -Wl% -lcublas -lnccl -lcudart -lstdc++,$(LDLIBS))
	@mkdir -p $(FUZZ_BUILD)/corpus-$*
	$(FUZZ_BUILD)/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
		$(FUZZ_BUILD)/corpus-$* tests/fuzz/corpus/$*

# ---- benchmarks ------------------------------------------------------------------------------------
# A bench binary is rebuilt when its own sources change too (second expansion: the stem in a wildcard).
.SECONDEXPANSION:
$(BUILD)/bench_%: $(LIB_FILES) $(BUILD)/xdc $$(wildcard bench/$$*/*.c)
	@mkdir -p $(BUILD)
	$(call say,LINK,$@)
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $(wildcard bench/$*/*.c) $(LIB_FILES) $(LDLIBS)

bench-%: deps deps-bench
	@$(MAKE) --no-print-directory $(BUILD)/xdc $(if $(wildcard bench/$*/*.c),$(BUILD)/bench_$*)
	@XDC_BIN=$(BUILD)/xdc XDC_BENCH_BIN=$(BUILD)/bench_$* bash bench/$*/run.sh

# ---- the GPU machine's bundle (docs/device.md) ----------------------------------------------------------
# `make gpu-bundle` builds xdc, the test binary and bench_gpu in a tree of their own (GPU_BUNDLE_BUILD) for
# the GPU machine's image: any x86-64-v3 CPU (not -march=native: that machine's CPU is not this one's),
# -lineinfo for compute-sanitizer, CUDA headers under -isystem (a newer gcc's warnings in them must not
# stop -Werror), and then tests/gpu/bundle.sh puts them with every library they need that the image lacks,
# a corpus and the scripts into GPU_BUNDLE (<= 40 MiB), the binaries' rpath $ORIGIN/../lib. Without nvcc
# it is the CPU-only bundle, and its MANIFEST says so.
GPU_BUNDLE ?= build/gpu-bundle
GPU_BUNDLE_BUILD ?= build/gpu-bundle-obj
GPU_BUNDLE_VARS := BUILD=$(GPU_BUNDLE_BUILD) CUDA=$(CUDA) EXTRA_CFLAGS=-march=x86-64-v3
ifeq ($(CUDA),1)
GPU_BUNDLE_VARS += CUDA_CFLAGS="-DXDC_HAVE_CUDA=1 -DXDC_HAVE_NCCL=1 -isystem $(CUDA_HOME)/include" NVFLAGS="$(NVFLAGS) -lineinfo"
endif
.PHONY: gpu-bundle
gpu-bundle:
	$(call install_debs,patchelf)
	@$(MAKE) --no-print-directory $(GPU_BUNDLE_VARS) $(GPU_BUNDLE_BUILD)/xdc $(GPU_BUNDLE_BUILD)/xdc_tests $(GPU_BUNDLE_BUILD)/bench_gpu \
		$(GPU_BUNDLE_BUILD)/libxdc.so
	@bash tests/gpu/bundle.sh $(GPU_BUNDLE_BUILD) $(GPU_BUNDLE) $(CUDA)

# ---- Debian packages -------------------------------------------------------------------------------
# Build and test needs; deps-bench adds the baselines benchmarks measure against.
DEB_PACKAGES := gcc make pkg-config openssl libssl-dev libzstd-dev zstd libyaml-dev libjansson-dev \
                libxxhash-dev libopenblas-dev libmicrohttpd-dev libcurl4-openssl-dev fortunes \
                iproute2 procps prometheus clang-format patchelf gnuplot-nox etcd-server etcd-client slurmctld slurmd \
                slurm-client munge nftables python3 python3-venv python3-setuptools python3-wheel python3-build
DEB_BENCH_PACKAGES := iperf3 openmpi-bin libopenmpi-dev clang g++ libgloo-dev
define install_debs
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || printf '%s ' $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "xdc: missing Debian packages; as root run: apt-get install -y --no-install-recommends $$missing" >&2; exit 69; fi; \
	echo "xdc: installing $$missing"; \
	apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null \
		|| { echo "xdc: apt-get install $$missing failed" >&2; exit 69; }
endef
# The venv with PyTorch (PyPI's torch and numpy) for xdc.torch, its example and the api_torch_* tests, which
# find it by the same variable (XDC_TORCH_VENV= skips it; those tests then skip, saying so). Never the
# system Python: a venv of /usr/bin/python3, made when it does not import torch yet.
XDC_TORCH_VENV ?= $(HOME)/.cache/xdc/torch-venv
# deps-debian alone is what the demos and lint need: `make demo` on a fresh machine does not wait for torch.
deps-debian:
	$(call install_debs,$(DEB_PACKAGES))
deps: deps-debian
	@if [ -n "$(XDC_TORCH_VENV)" ] && ! $(XDC_TORCH_VENV)/bin/python -c 'import torch' 2>/dev/null; then \
		echo "xdc: installing torch and numpy (PyPI) into the venv $(XDC_TORCH_VENV)"; \
		/usr/bin/python3 -m venv $(XDC_TORCH_VENV) && $(XDC_TORCH_VENV)/bin/pip install -q torch numpy \
			&& $(XDC_TORCH_VENV)/bin/python -c 'import torch' \
		|| { echo "xdc: pip install torch numpy into $(XDC_TORCH_VENV) failed (no PyPI?); make deps XDC_TORCH_VENV= skips it" >&2; exit 69; }; \
	fi
deps-bench:
	$(call install_debs,$(DEB_BENCH_PACKAGES))

check-layers:
	@bash tests/check_layers.sh

# Format check (.clang-format, clang-format 14), the layer rule, no symbol cycle among the orchestrator's
# objects (built first: the check reads them with nm) and the designated-initializer rule.
lint: deps-debian libs
	@XDC_LINT_OBJ=$(BUILD)/obj bash tests/lint.sh && echo "lint: clean"
format:
	@git ls-files '*.c' '*.h' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
