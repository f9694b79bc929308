// The oldest glibc the library loads on (its manylinux tag) is the newest symbol version it imports. Built on a
// recent glibc, the statically linked libstdc++ and the compiler would raise that floor far above what onnxruntime
// itself needs (manylinux_2_27/2_28). This file, linked with the -Wl,--wrap options that CMakeLists.txt sets next to
// it, holds every import at a version glibc 2.27 already had; scripts/wheel_check.sh asserts the resulting tag.
//   pow (GLIBC_2.29 default): the 2.29 version only dropped the SVID error wrapper; the old one gives the same
//     values (both call the same implementation), so references go to pow@<base version>.
//   pthread_once, __pthread_key_create (GLIBC_2.34, when libpthread moved into libc): the same functions under
//     their original versions (in libpthread.so.0 before 2.34, which the library therefore links by name).
//   __libc_single_threaded (GLIBC_2.32): libstdc++ reads it to skip atomic reference counting in single-threaded
//     processes; a private copy that always says "multi-threaded" keeps the atomics, which is always correct.
//   arc4random (GLIBC_2.36): referenced only by std::random_device (pulled in with libstdc++'s string instances,
//     never called by the library); a private one over getentropy (GLIBC_2.25) keeps it working all the same.
// Not wrapped: _dl_find_object (GLIBC_2.35, static libgcc's unwinder): the library links the system's libgcc_s
// instead, which every glibc system has (onnxruntime links it too).
#if defined(__GLIBC__) || (defined(__linux__) && __has_include(<features.h>))
#include <features.h>
#endif

#if defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))
#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#if defined(__x86_64__)
#define ONNX_POOLS_GLIBC_BASE "GLIBC_2.2.5"
#else
#define ONNX_POOLS_GLIBC_BASE "GLIBC_2.17"
#endif

extern "C" {
// References to these names are bound to the versions named in .symver (undefined here, resolved in glibc).
double onnx_pools_glibc_pow(double, double);
int onnx_pools_glibc_pthread_once(pthread_once_t*, void (*)());
int onnx_pools_glibc_pthread_key_create(pthread_key_t*, void (*)(void*));
__asm__(".symver onnx_pools_glibc_pow, pow@" ONNX_POOLS_GLIBC_BASE);
__asm__(".symver onnx_pools_glibc_pthread_once, pthread_once@" ONNX_POOLS_GLIBC_BASE);
__asm__(".symver onnx_pools_glibc_pthread_key_create, __pthread_key_create@" ONNX_POOLS_GLIBC_BASE);

__attribute__((visibility("hidden"))) double __wrap_pow(double x, double y) { return onnx_pools_glibc_pow(x, y); }
__attribute__((visibility("hidden"))) int __wrap_pthread_once(pthread_once_t* once, void (*init)()) {
  return onnx_pools_glibc_pthread_once(once, init);
}
__attribute__((visibility("hidden"))) int __wrap___pthread_key_create(pthread_key_t* key, void (*destroy)(void*)) {
  return onnx_pools_glibc_pthread_key_create(key, destroy);
}

__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;

__attribute__((visibility("hidden"))) uint32_t arc4random() noexcept {
  uint32_t value;
  if (getentropy(&value, sizeof value) != 0) abort();  // as glibc's arc4random: no entropy is fatal
  return value;
}
}
#endif
