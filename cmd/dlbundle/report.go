package main

import "errors"

// ReportCmd is not built yet.
type ReportCmd struct{}

// Run reports that the verb is not built yet.
func (c *ReportCmd) Run() error { return errors.New("not built yet") }
