package main

import "errors"

// VerifyCmd is not built yet.
type VerifyCmd struct{}

// Run reports that the verb is not built yet.
func (c *VerifyCmd) Run() error { return errors.New("not built yet") }
