"""DirectVoxGO (GPL: run as a separate program, never imported) beside ours."""
