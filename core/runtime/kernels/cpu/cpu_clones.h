// TALLY_CPU_CLONES: a function compiled three times, for AVX-512, for AVX2 and for the
// baseline, the loader picking one by the features of the CPU it runs on (GCC's
// target_clones): one binary runs everywhere and uses the wide registers where they exist.
// The clones are named by instruction set, not by processor: GCC resolves "arch=haswell"
// by the CPU's model, so an AMD processor with AVX2 would get the baseline. Results do not
// depend on the clone (no floating-point contraction or reassociation is allowed, so only
// the width of the loops differs). ThreadSanitizer would instrument the loader's resolver,
// which runs before the sanitizer's runtime exists; its builds keep the baseline only.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define TALLY_CPU_CLONES
#else
#define TALLY_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
