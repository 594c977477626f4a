"""The studies as Python calls: one function per study, taking the command's options and
returning its rows as a pandas DataFrame (`attnbench.time(seq="1k,4k")`)."""
