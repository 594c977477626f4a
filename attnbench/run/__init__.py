"""Cases and the runner: a study's cases in, each case's rows out, every failure a row."""
