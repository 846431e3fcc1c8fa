int dep(void) { return 41; }
