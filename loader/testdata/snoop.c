/* snoop.c — preloaded before the shim by TestShimExitIsAsyncSignalSafe: the
 * stdio formatters the shim may call. Once the probe has set DLB_IN_EXIT
 * (right before _exit), any call is from the shim's _exit, which must use
 * only async-signal-safe code: say so on stderr. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void check(const char *fn)
{
	if (getenv("DLB_IN_EXIT")) {
		write(2, "snoop: ", 7);
		for (const char *p = fn; *p; p++) write(2, p, 1);
		write(2, " called in _exit\n", 17);
	}
}

int snprintf(char *s, size_t n, const char *fmt, ...)
{
	check("snprintf");
	va_list ap;
	va_start(ap, fmt);
	int r = vsnprintf(s, n, fmt, ap);
	va_end(ap);
	return r;
}

int __snprintf_chk(char *s, size_t n, int flag, size_t slen, const char *fmt, ...)
{
	(void)flag; (void)slen;
	check("__snprintf_chk");
	va_list ap;
	va_start(ap, fmt);
	int r = vsnprintf(s, n, fmt, ap);
	va_end(ap);
	return r;
}

int sprintf(char *s, const char *fmt, ...)
{
	check("sprintf");
	va_list ap;
	va_start(ap, fmt);
	int r = vsprintf(s, fmt, ap);
	va_end(ap);
	return r;
}
