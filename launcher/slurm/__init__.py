"""Running a spec on Slurm: the allocation as host list, one srun step per attempt, sbatch."""
