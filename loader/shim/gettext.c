/* gettext.c — bindtextdomain: an app's own message catalogs from the stage. */
#include "shim_state.h"

/* ---- gettext: an app's own message catalogs from the stage ----
 *
 * glibc's gettext opens DIRNAME/<language variant>/LC_MESSAGES/DOMAIN.mo
 * with internal calls (__open_nocancel in _nl_load_domain) that no preload
 * sees; DIRNAME comes from the app's bindtextdomain. So bindtextdomain is
 * where the stage can be put in: glibc is given STAGE/root + DIRNAME (its
 * canonical form) when the table decides, for every name in DIRNAME's
 * listing, what NAME/LC_MESSAGES/DOMAIN.mo is (bundled, or known missing):
 * glibc builds its candidates from LANGUAGE and the locale at lookup time,
 * any language may be asked for later, and a candidate whose language is
 * not in the listing is ENOENT natively and in the stage alike (a bundled
 * directory is staged with what the table holds, which for these names is
 * what the original holds). Anything less (a relative DIRNAME, which glibc
 * joins to the cwd at lookup time; NULL, a query; a tree the table does not
 * decide) passes through unchanged.
 *
 * What the app sees stays its own: glibc returns its own copy of the
 * dirname it was given (set_binding_values strdup()s it, and frees it at
 * the next binding of the domain), and bindtextdomain(DOMAIN, NULL)
 * returns that copy too. The copy glibc holds is the staged name, so both
 * answers are mapped back to the dirname the app gave, kept in a small
 * fixed table (no allocation; a domain beyond BIND_MAX is simply not
 * redirected). Like glibc's pointer, ours stays valid until the domain is
 * bound again. */
#define BIND_MAX 16
#define BIND_DOMAIN_MAX 128
static struct bind_slot {
	char domain[BIND_DOMAIN_MAX]; /* "" = free */
	char orig[DLB_PATH_MAX];      /* what the app passed, returned to it */
	char staged[DLB_PATH_MAX + sizeof stage_root]; /* what glibc holds */
} bind_slots[BIND_MAX] DLB_COLD;
static int bind_lock; /* glibc serialises bindtextdomain itself; our table too */

static void bind_enter(void) { while (__atomic_test_and_set(&bind_lock, __ATOMIC_ACQUIRE)) ; }
static void bind_leave(void) { __atomic_clear(&bind_lock, __ATOMIC_RELEASE); }

/* catalog_decided: the table decides dir[0:n]/a/b/<domain>.mo. */
static int catalog_decided(const char *dir, size_t n, const char *a, size_t an, const char *b, size_t bn, const char *domain, size_t dn)
{
	char p[DLB_PATH_MAX], out[DLB_PATH_MAX];
	struct dlb_res res;
	if (n + an + bn + dn + 6 >= sizeof p) return 0;
	size_t q = 0;
	memcpy(p, dir, n), q = n, p[q++] = '/';
	memcpy(p + q, a, an), q += an, p[q++] = '/';
	memcpy(p + q, b, bn), q += bn, p[q++] = '/';
	memcpy(p + q, domain, dn), q += dn;
	memcpy(p + q, ".mo", 4);
	return shim_resolve(p, 0, 1, out, &res) != DLB_UNKNOWN;
}

/* catalogs_decided: dir[0:n] (canonical) is a bundled directory, and for
 * every NAME of its listing the table decides NAME/LC_MESSAGES/<domain>.mo
 * and, where NAME is a bundled directory, NAME/<C>/<domain>.mo for every C
 * it lists (dcgettext's other categories, LC_TIME...: glibc reads those
 * from the same directory). */
static int catalogs_decided(const char *dir, size_t n, const char *domain)
{
	const struct dlb_entry *d = dlb_lookup(table, dir, n);
	uint32_t k;
	const struct dlb_record *r = dlb_listing(table, d, &k);
	if (!r) return 0;
	size_t dn = strlen(domain);
	char sub[DLB_PATH_MAX];
	for (uint32_t i = 0; i < k; i++) {
		const char *name = dlb_record_name(table, &r[i]);
		if (!name) return 0;
		size_t nn = r[i].name_len;
		if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
		if (!catalog_decided(dir, n, name, nn, "LC_MESSAGES", 11, domain, dn)) return 0;
		if (n + 1 + nn >= sizeof sub) return 0;
		memcpy(sub, dir, n), sub[n] = '/', memcpy(sub + n + 1, name, nn + 1);
		char out[DLB_PATH_MAX];
		struct dlb_res res;
		if (shim_resolve(sub, 0, 1, out, &res) != DLB_BUNDLED || res.ent->type != DLB_DIR) continue;
		uint32_t ck;
		const struct dlb_record *c = dlb_listing(table, res.ent, &ck);
		for (uint32_t j = 0; c && j < ck; j++) {
			const char *cat = dlb_record_name(table, &c[j]);
			if (!cat) return 0;
			if (!strcmp(cat, ".") || !strcmp(cat, "..") || !strcmp(cat, "LC_MESSAGES")) continue; /* checked above */
			if (!catalog_decided(dir, n, name, nn, cat, c[j].name_len, domain, dn)) return 0;
		}
	}
	return 1;
}

/* bind_find: the slot of domain, or NULL. Under bind_lock. */
static struct bind_slot *bind_find(const char *domain)
{
	for (int i = 0; i < BIND_MAX; i++)
		if (bind_slots[i].domain[0] && !strcmp(bind_slots[i].domain, domain)) return &bind_slots[i];
	return NULL;
}

char *bindtextdomain(const char *domain, const char *dirname)
{
	ensure_init();
	if (!real_bindtextdomain) return NULL;
	if (!domain || !domain[0] || strlen(domain) >= BIND_DOMAIN_MAX)
		return real_bindtextdomain(domain, dirname); /* glibc's answer (NULL, EINVAL) */
	if (!dirname) {
		/* A query: glibc's current binding, or the app's name for ours. */
		char *cur = real_bindtextdomain(domain, NULL);
		bind_enter();
		struct bind_slot *s = bind_find(domain);
		if (s && cur && !strcmp(cur, s->staged)) cur = s->orig;
		bind_leave();
		return cur;
	}
	size_t dl = strlen(dirname);
	/* glibc joins each LANGUAGE entry to the dirname as it is, ".." and "/"
	 * included (2.36: LANGUAGE=../other/de opens DIR/../other/de/...), which
	 * may reach what the listing does not decide: then no redirection. */
	const char *language = getenv("LANGUAGE");
	int lang_ok = !(language && strchr(language, '/'));
	/* The same binding again (an app may bind before every lookup): the
	 * table has not changed, and the process wrote nothing. The check of
	 * every language costs ~0.7 us per language, glibc's answer to a
	 * repeated binding ~0.03 us. */
	bind_enter();
	struct bind_slot *same = bind_find(domain);
	if (same && lang_ok && !strcmp(same->orig, dirname) && !shim_dirty_any() && !shim_dirty_all()) {
		char *ret = real_bindtextdomain(domain, same->staged);
		if (ret) ret = same->orig;
		bind_leave();
		return ret;
	}
	bind_leave();
	char canon[DLB_PATH_MAX];
	struct dlb_res r;
	int redirect = table && dirname[0] == '/' && dl < sizeof canon && lang_ok &&
		       shim_resolve(dirname, 0, 1, canon, &r) == DLB_BUNDLED && r.ent->type == DLB_DIR &&
		       catalogs_decided(canon, r.len, domain);
	bind_enter();
	struct bind_slot *s = bind_find(domain);
	if (!redirect) {
		if (s) s->domain[0] = 0; /* glibc now holds the app's own name */
		bind_leave();
		debug_log("pass", "bindtextdomain", dirname, 0);
		return real_bindtextdomain(domain, dirname);
	}
	if (!s)
		for (int i = 0; i < BIND_MAX && !s; i++)
			if (!bind_slots[i].domain[0]) s = &bind_slots[i];
	if (!s || staged(s->staged, sizeof s->staged, canon, r.len) != 0) {
		if (s) s->domain[0] = 0; /* glibc gets the app's own name */
		bind_leave();
		debug_log("pass", "bindtextdomain", dirname, 0); /* the table is full */
		return real_bindtextdomain(domain, dirname);
	}
	memcpy(s->orig, dirname, dl + 1);
	memcpy(s->domain, domain, strlen(domain) + 1);
	char *ret = real_bindtextdomain(domain, s->staged);
	/* glibc failed (ENOMEM): it keeps the old binding, which is not ours. */
	if (!ret) s->domain[0] = 0;
	else ret = s->orig;
	bind_leave();
	debug_log("bundled", "bindtextdomain", dirname, s->staged);
	return ret;
}

