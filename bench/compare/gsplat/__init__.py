"""Gaussian splatting (gsplat) on the project's scenes: the upper anchor."""
