package main

import "errors"

// PushCmd is not built yet.
type PushCmd struct{}

// Run reports that the verb is not built yet.
func (c *PushCmd) Run() error { return errors.New("not built yet") }
