package main

import "errors"

// PullCmd is not built yet.
type PullCmd struct{}

// Run reports that the verb is not built yet.
func (c *PullCmd) Run() error { return errors.New("not built yet") }
