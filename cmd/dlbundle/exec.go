package main

import "errors"

// ExecCmd is not built yet.
type ExecCmd struct{}

// Run reports that the verb is not built yet.
func (c *ExecCmd) Run() error { return errors.New("not built yet") }
