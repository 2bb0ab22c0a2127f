"""Running the gang: the supervisor's observe-decide-act loop, the policy that decides, the gang's
states and results, restart phases, rehearsed faults. It acts only through a transport."""
