// Package view draws the load sequence of an app as one self-contained HTML
// page (inline SVG and tables, no script, no external asset): the pilot's
// file calls over time and by directory, the image's bytes by prefix, what
// exec saves per rank, and the misses of exec reports.
//
// It reads its inputs through their packages (trace.Trace, image.Image,
// report.ProcessReport) and never parses a format itself. model.go reduces
// them to the figures the page shows; page.go lays the charts out and
// writes the page with html/template, which escapes every path and command
// (they come from traces and images, which anyone may have written).
// It must not change what it reads, nor reach the network.
package view
