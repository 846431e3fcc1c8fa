package registry

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/dlbundle/dlbundle/image"
)

// describe opens (and so validates) the image file and returns the
// manifest annotations that let a registry UI, `dlbundle inspect REF` or a
// site's tooling tell images apart without downloading them.
func describe(file string) (map[string]string, error) {
	im, err := image.OpenFile(file)
	if err != nil {
		return nil, fmt.Errorf("push: %w; only .dlimg images made by `dlbundle build` can be pushed", err)
	}
	defer im.Close()
	var content int64
	for _, e := range im.Entries() {
		if e.Type == image.TypeRegular {
			content += e.Size
		}
	}
	a := map[string]string{
		AnnotationTitle:       filepath.Base(file),
		AnnotationTOCDigest:   im.TOCDigest(),
		AnnotationImageSize:   strconv.FormatInt(im.Size(), 10),
		AnnotationContentSize: strconv.FormatInt(content, 10),
		AnnotationEntries:     strconv.Itoa(len(im.Entries())),
	}
	if cmd := pilotCommand(im.Pilots()); cmd != "" {
		a[AnnotationPilotCommand] = cmd
	}
	build := im.BuildInfo()
	if v := build["dlbundle"]; v != "" {
		a[AnnotationVersion] = v
	}
	// The build's time is in the image only when SOURCE_DATE_EPOCH fixed it
	// (reproducible builds); the push time would make equal images differ.
	if t, err := time.Parse(time.RFC3339, build["time"]); err == nil {
		a[AnnotationCreated] = t.UTC().Format(time.RFC3339)
	}
	return a, nil
}

// pilotCommand is the first pilot run's command line as a JSON array.
func pilotCommand(pilots []json.RawMessage) string {
	if len(pilots) == 0 {
		return ""
	}
	var h struct {
		Command []string `json:"command"`
	}
	if json.Unmarshal(pilots[0], &h) != nil || len(h.Command) == 0 {
		return ""
	}
	b, _ := json.Marshal(h.Command)
	return string(b)
}
