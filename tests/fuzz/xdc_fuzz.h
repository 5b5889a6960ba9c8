/* xdc_fuzz.h — one definition per fuzz target serves two builds:
 *  - `make fuzz-NAME` (clang -fsanitize=fuzzer,address, -DXDC_LIBFUZZER): LLVMFuzzerTestOneInput;
 *  - the test binary (gcc): a test `fuzz_replay_NAME` that checks every file of tests/fuzz/corpus/NAME
 *    against its line in tests/fuzz/corpus/NAME.expect (the parser's result and what it decoded), then
 *    runs a fixed number of seeded byte mutations of each through the target.
 * Each target file defines both halves:
 *  - XDC_FUZZ_TARGET(name) { ... }: must never crash or leak on any input; returns 0;
 *  - XDC_FUZZ_VERDICT(name) { ... }: parses `data` the ordinary way and returns the parser's result; on
 *    success it writes a one-line summary of the decoded content (counts, a hash of the values) into
 *    summary[cap], on failure the parser's message, so the expectations pin both. */
#ifndef XDC_FUZZ_H
#define XDC_FUZZ_H

#include "common/xdc_err.h"

#include <stddef.h>
#include <stdint.h>

typedef int (*xdc_fuzz_fn)(const uint8_t *data, size_t size);
typedef xdc_err_t (*xdc_fuzz_verdict_fn)(const uint8_t *data, size_t size, char *summary, size_t cap);

#define XDC_FUZZ_VERDICT(name) \
    xdc_err_t xdc_fuzz_verdict_##name(const uint8_t *data, size_t size, char *summary, size_t cap)

#ifdef XDC_LIBFUZZER
#define XDC_FUZZ_TARGET(name)                                                                            \
    XDC_FUZZ_VERDICT(name);                                                                              \
    int xdc_fuzz_##name(const uint8_t *data, size_t size);                                               \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return xdc_fuzz_##name(data, size); } \
    int xdc_fuzz_##name(const uint8_t *data, size_t size)
#else
#include "tests/xdc_test.h"
/* Checks the corpus of `name` against NAME.expect, then mutates it through `fn`. Fails when the folder
 * is empty, when a file has no expectation or an expectation no file, and on any verdict that differs. */
void xdc_fuzz_replay(const char *name, xdc_fuzz_fn fn, xdc_fuzz_verdict_fn verdict);
#define XDC_FUZZ_TARGET(name)                                                                                 \
    XDC_FUZZ_VERDICT(name);                                                                                   \
    int xdc_fuzz_##name(const uint8_t *data, size_t size);                                                    \
    XDC_TEST_T(fuzz_replay_##name, 300) { xdc_fuzz_replay(#name, xdc_fuzz_##name, xdc_fuzz_verdict_##name); } \
    int xdc_fuzz_##name(const uint8_t *data, size_t size)
#endif

#endif /* XDC_FUZZ_H */
