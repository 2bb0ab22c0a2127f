"""The test labs: real servers and hosts this machine runs for the tests (sshd on loopback aliases,
network-namespace hosts, a Slurm cluster, podman containers, a stand-in nvidia-smi), and the two
helpers every lab and test shares (`free_port`, `wait_for`, in waiting.py and ports.py). Each lab
makes what it needs in a test's temporary directory and removes it afterwards, pass or fail."""
