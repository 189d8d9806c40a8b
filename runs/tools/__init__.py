"""Built-in tools and their isolated execution. Nothing here imports Django: the tools run
in a child process that a timeout can kill, whole process group and all (SPEC T6)."""
