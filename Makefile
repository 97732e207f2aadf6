# The two commands of the README: `make demo` and `make test`. Both install what is missing
# (from Debian's packages) first: make demo and make install the build set, make test the test set
# (scripts/install-deps.sh says what each holds; it starts no service and leaves none enabled).
JOBS ?= $(shell nproc)
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
# Each fuzz target's time in make test (the gate), and in make fuzz (a longer search).
FUZZ_SECONDS ?= 20
FUZZ_LONG_SECONDS ?= 600
# Tests at once: most of them wait on daemons and timers, so more than the cores; the few that
# burn CPU share a lock (tests/CMakeLists.txt, FERRY_HEAVY).
CTEST_JOBS ?= $(shell echo $$(( $$(nproc) * 3 )))
# The sanitizers' suite: ASan's processes burn 2-3 times the CPU, and at 3 per core their nodes
# missed 3 s answer deadlines and 10 s read leases (28 Nov 2026); 2 per core.
ASAN_CTEST_JOBS ?= $(shell echo $$(( $$(nproc) * 2 )))
PREFIX ?= /usr/local
# Ninja for a build directory made now, when it is installed (install-deps.sh's build set has
# it): an up-to-date build takes it 0.9 s, make's generator 6.4 s (here), which every make check
# paid. A directory configured before keeps its generator.
generator = $(if $(wildcard $(1)/CMakeCache.txt),,$(if $(shell command -v ninja),-G Ninja))

.PHONY: all deps deps-build build asan fuzz fuzz-build test check check-load test-unit test-asan test-fuzz lint demo \
	bench clean format format-check install

# What clang-format keeps in shape; the version is Debian's (14), whose output make format-check
# holds the tree to.
FORMATTED = include/*.h src/*/*.[ch] src/*/*/*.[ch] tools/*.[ch] tools/bench/*.[ch] tests/*.[ch] \
	fuzz/*.c bench/*.c python/_ferry/*.[ch]

all: build

# Everything make test, make bench and make fuzz need; deps-build: what make build needs.
deps:
	@sh scripts/install-deps.sh test

deps-build:
	@sh scripts/install-deps.sh build

build:
	cmake -S . -B $(BUILD) $(call generator,$(BUILD)) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
	    >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

asan:
	cmake -S . -B $(ASAN_BUILD) $(call generator,$(ASAN_BUILD)) -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)

fuzz-build:
	CC=clang cmake -S . -B $(FUZZ_BUILD) $(call generator,$(FUZZ_BUILD)) -DCMAKE_BUILD_TYPE=Debug -DFERRY_FUZZ=ON \
	    -DBUILD_TESTING=OFF >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_targets

# The gate, within 12 minutes on a 2-core machine: the format check, the static analysers,
# the plain build's tests but the heavy ones and the fabric's (check-load: on tcp, beside two
# processes that keep the cores busy), every fuzz target for FUZZ_SECONDS; each part timed,
# the times printed at the end (scripts/suite.sh).
test: deps
	@bash scripts/suite.sh format-check build lint check-load fuzz-build test-fuzz

# CI (.ci/run) runs the gate, then the whole suite under ASan+UBSan (make test-asan): every
# transport (tcp, tcp;ofi_rxm, shm), the heavy cases, the install tests. That takes 17 to 18
# minutes more here (1,001-1,043 s of tests, Nov 2026): too long for the gate, never left out
# of CI.

# The inner loop: the plain build, unit tests, single-node tests, the cluster on tcp, Python;
# not the heavy tests (tests/CMakeLists.txt, FERRY_HEAVY: kill loops, chaos, benchmarks) nor
# the outer ones (FERRY_OUTER: the install tests, pip's build, the deps script, Sentinel), nor
# the twins that run cases again with the gets through the daemon (_nofast, FERRY_BOTH_PATHS).
LOAD_SELECT = -LE heavy -E '_(rxm|shm)([.]|$$)'
CHECK_SELECT = -LE 'heavy|outer' -E '_(rxm|shm)([.]|$$)|_nofast'
check: build
	cd $(BUILD) && ctest --output-on-failure -j $(CTEST_JOBS) --timeout 300 $(CHECK_SELECT)

# The inner loop's tests and the install test on a busy machine: beside two processes that
# keep both cores of a 2-core machine busy (scripts/with-hogs.sh). Timing must never decide a
# test.
check-load: build
	cd $(BUILD) && bash $(CURDIR)/scripts/with-hogs.sh 2 ctest --output-on-failure -j $(CTEST_JOBS) \
	    --timeout 900 $(LOAD_SELECT)

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(CTEST_JOBS) --timeout 300

test-asan: asan
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    ctest --output-on-failure -j $(ASAN_CTEST_JOBS) --timeout 600

test-fuzz: fuzz-build
	bash scripts/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# A longer search than the gate's.
fuzz: fuzz-build
	bash scripts/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_LONG_SECONDS)

# clang-tidy's analyzer and cppcheck over src/, clean (scripts/lint.sh).
lint: build
	bash scripts/lint.sh $(BUILD)

# Installs under PREFIX (default /usr/local), staged under DESTDIR when set: the programs,
# libferry (.so with its SONAME, .a), ferry.h, ferry.pc, the systemd units, the man pages.
install: deps-build
	cmake -S . -B $(BUILD) $(call generator,$(BUILD)) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)
	DESTDIR=$(DESTDIR) cmake --install $(BUILD)

# The build after the packages it needs, also under make -j (a prerequisite list runs both at
# once).
demo: deps-build
	$(MAKE) build
	sh scripts/demo.sh $(BUILD)

bench: build
	$(BUILD)/bin/ferry-bench local

format:
	clang-format -i $(FORMATTED)

format-check:
	@clang-format --version | grep -q 'version 14\.' || \
	    { echo "format-check: needs Debian's clang-format 14 (apt-get install clang-format)"; exit 1; }
	clang-format --dry-run --Werror $(FORMATTED)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
