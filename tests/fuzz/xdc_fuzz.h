/* xdc_fuzz.h — one definition per fuzz target serves two builds:
 *  - `make fuzz-NAME` (clang -fsanitize=fuzzer,address, -DXDC_LIBFUZZER): LLVMFuzzerTestOneInput;
 *  - the test binary (gcc): a test `fuzz_replay_NAME` that runs every file of tests/fuzz/corpus/NAME
 *    plus a fixed number of seeded byte mutations of each, so the corpus is exercised in `make test`.
 * The target body must never crash or leak on any input; it returns 0. */
#ifndef XDC_FUZZ_H
#define XDC_FUZZ_H

#include <stddef.h>
#include <stdint.h>

typedef int (*xdc_fuzz_fn)(const uint8_t *data, size_t size);

#ifdef XDC_LIBFUZZER
#define XDC_FUZZ_TARGET(name)                                                                            \
    int xdc_fuzz_##name(const uint8_t *data, size_t size);                                               \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return xdc_fuzz_##name(data, size); } \
    int xdc_fuzz_##name(const uint8_t *data, size_t size)
#else
#include "tests/xdc_test.h"
/* Runs the corpus of `name` through `fn`; fails when the corpus folder is empty. */
void xdc_fuzz_replay(const char *name, xdc_fuzz_fn fn);
#define XDC_FUZZ_TARGET(name)                                                        \
    int xdc_fuzz_##name(const uint8_t *data, size_t size);                           \
    XDC_TEST_T(fuzz_replay_##name, 300) { xdc_fuzz_replay(#name, xdc_fuzz_##name); } \
    int xdc_fuzz_##name(const uint8_t *data, size_t size)
#endif

#endif /* XDC_FUZZ_H */
