/* rawsys.h — raw Linux system calls for audit.c, which links against nothing
 * (an LD_AUDIT object with DT_NEEDED libc would make ld.so load and search for
 * a second libc in the audit namespace: ~22 extra lookups per process). */
#ifndef DLB_RAWSYS_H
#define DLB_RAWSYS_H

#include <stdint.h>

#if defined(__x86_64__)
#define DLB_SYS_read 0
#define DLB_SYS_write 1
#define DLB_SYS_close 3
#define DLB_SYS_fstat 5
#define DLB_SYS_mmap 9
#define DLB_SYS_munmap 11
#define DLB_SYS_getpid 39
#define DLB_SYS_prctl 157
#define DLB_SYS_openat 257
#define DLB_SYS_readlinkat 267
#define DLB_SYS_newfstatat 262
static inline long dlb_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#elif defined(__aarch64__)
#define DLB_SYS_read 63
#define DLB_SYS_write 64
#define DLB_SYS_close 57
#define DLB_SYS_fstat 80
#define DLB_SYS_mmap 222
#define DLB_SYS_munmap 215
#define DLB_SYS_getpid 172
#define DLB_SYS_prctl 167
#define DLB_SYS_openat 56
#define DLB_SYS_readlinkat 78
#define DLB_SYS_newfstatat 79
static inline long dlb_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
	return x0;
}
#else
#error "rawsys.h: add the system call numbers of this architecture"
#endif

#define dlb_sys(n, a, b, c) dlb_syscall6(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)

#endif
