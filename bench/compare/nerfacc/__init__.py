"""nerfacc's occupancy-grid model on our grid and on F.grid_sample."""
