"""What ``stagegate run`` does on the stage's machine: run the command, end every process
it started, observe the machine, record it all; and the pytest plugin and guard."""
