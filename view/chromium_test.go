package view

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromium runs Debian's headless Chromium on a local file with one action
// (--screenshot=FILE or --dump-dom) and returns its stdout. The flags keep
// it off the network (this machine has none: without them it retries
// Google's hosts at every start) and out of the user's profile.
func chromium(t *testing.T, page string, action ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("Debian's chromium is not installed (%v): run `make deps`", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + filepath.Join(home, "profile"), "--hide-scrollbars", "--window-size=1100,1800"},
		action...)
	cmd := exec.CommandContext(ctx, bin, append(args, "file://"+page)...)
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", action, err, stderr.String())
	}
	return stdout.Bytes()
}

// shotStats are figures of a screenshot: luminance variance (blank: 0) and
// the pixels of the charts' "found" and "failed" colours.
type shotStats struct {
	variance      float64
	found, failed int
}

func screenshot(t *testing.T, page string) shotStats {
	t.Helper()
	shot := filepath.Join(t.TempDir(), "page.png")
	chromium(t, page, "--screenshot="+shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	near := func(v uint32, want uint32) bool { return v>>8 < want+12 && v>>8+12 > want }
	var s shotStats
	var n, sum, sumSq float64
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			l := 0.299*float64(r>>8) + 0.587*float64(g>>8) + 0.114*float64(b>>8)
			n, sum, sumSq = n+1, sum+l, sumSq+l*l
			switch {
			case near(r, 0x44) && near(g, 0x77) && near(b, 0xaa):
				s.found++
			case near(r, 0xee) && near(g, 0x66) && near(b, 0x77):
				s.failed++
			}
		}
	}
	mean := sum / n
	s.variance = sumSq/n - mean*mean
	return s
}

// TestPageRendersInChromium draws the page of a small app (trace, image,
// report) in a real browser. The screenshot must not be blank, and its
// charts must be drawn: against the same page without its SVG charts
// (legends and tables use the colours too), there must be many more pixels
// of the found and failed colours. The DOM must hold the sections and
// known labels.
func TestPageRendersInChromium(t *testing.T) {
	fx := newFixture(t)
	dir := t.TempDir()
	page, bare := filepath.Join(dir, "app.html"), filepath.Join(dir, "bare.html")
	var b bytes.Buffer
	if err := Write(&b, fx.in); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	noCharts := regexp.MustCompile(`(?s)<svg .*?</svg>`).ReplaceAll(b.Bytes(), nil)
	if err := os.WriteFile(bare, noCharts, 0o644); err != nil {
		t.Fatal(err)
	}
	full, without := screenshot(t, page), screenshot(t, bare)
	if full.variance < 100 {
		t.Errorf("screenshot is nearly blank: luminance variance %.1f", full.variance)
	}
	if full.found-without.found < 500 || full.failed-without.failed < 200 {
		t.Errorf("charts not drawn: %d -> %d pixels of the 'found' colour, %d -> %d of 'failed' without -> with the charts; want +500, +200",
			without.found, full.found, without.failed, full.failed)
	}

	dom := string(chromium(t, page, "--dump-dom"))
	for _, want := range []string{
		"Where start-up goes", "/opt/app/bin/app --input small",
		"File calls over time", "Lookups by directory", "/usr/share/zoneinfo",
		"The image's bytes by prefix", "/opt/app/lib",
		"What exec saves per rank", "Misses of the report", "/tmp/job42/input.nml", "--include /tmp/job42",
		"Start-up per rank, in seconds", "natively, 24,000 ranks", "under exec, 24,000 ranks",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered DOM lacks %q", want)
		}
	}
	if c := strings.Count(dom, "<svg"); c != 6 {
		t.Errorf("rendered DOM has %d charts, want 6 (start-up in seconds, time, directories, prefixes, savings, report)", c)
	}
}
