package main

import "errors"

// ExtractCmd is not built yet.
type ExtractCmd struct{}

// Run reports that the verb is not built yet.
func (c *ExtractCmd) Run() error { return errors.New("not built yet") }
