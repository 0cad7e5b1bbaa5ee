"""`grid-train view RUN`: a run in the browser, finished or training (viser).

Modules: `command` (the command line), `server` (`Viewer`: the viser server over a run
directory, its panel and curves, the experiment's view loaded from each newer checkpoint),
`progressive` (one renderer thread per browser: previews while the camera moves, the full
frame once it stops). What each experiment shows is its own (`ExperimentSpec.view`: the
`view` module of its package).
"""
