"""Training as a user runs it: NeRF and SDF steps, whole commands, the viewer, scene pools."""
