package main

import "errors"

// TraceCmd is not built yet.
type TraceCmd struct{}

// Run reports that the verb is not built yet.
func (c *TraceCmd) Run() error { return errors.New("not built yet") }

// TraceStubCmd is not built yet.
type TraceStubCmd struct{}

// Run reports that the verb is not built yet.
func (c *TraceStubCmd) Run() error { return errors.New("not built yet") }
