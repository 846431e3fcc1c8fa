package main

import "errors"

// InspectCmd is not built yet.
type InspectCmd struct{}

// Run reports that the verb is not built yet.
func (c *InspectCmd) Run() error { return errors.New("not built yet") }
