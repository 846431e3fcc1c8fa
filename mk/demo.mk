# make demo-exec: trace -> build -> exec on the bundled examples (examples/demo),
# printing native vs exec file-system operations on the app's tree and wall time.
.PHONY: demo-exec bench-stage
DEMO_TARGETS += demo-exec
APT_PACKAGES += gcc strace python3

demo-exec: $(BIN)
	examples/demo/run-demo.sh $(BIN)
