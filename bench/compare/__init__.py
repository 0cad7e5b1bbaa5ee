"""Other projects run beside ours: DirectVoxGO, nerfacc, gsplat (never imported by grid/train)."""
