int dep(void);
int plug(void) { return dep() + 1; }
