package registry

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// describe returns the manifest annotations for an image file.
func describe(file string) (map[string]string, error) {
	st, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	return map[string]string{
		AnnotationTitle:     filepath.Base(file),
		AnnotationImageSize: strconv.FormatInt(st.Size(), 10),
	}, nil
}
