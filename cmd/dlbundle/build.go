package main

import "errors"

// BuildCmd is not built yet.
type BuildCmd struct{}

// Run reports that the verb is not built yet.
func (c *BuildCmd) Run() error { return errors.New("not built yet") }
