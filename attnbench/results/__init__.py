"""Result rows: their schema, the sink that writes them, the file formats and reading.

schema      what a row is and the flat record it is written as
formats     the CSV and JSON text of records, and how it reaches the disk
sink        ResultSink: locked outputs, each finished case appended to all of them
read        read_rows: CSV or JSON, schema 1 or 2, back as a frame
interrupts  SIGTERM as Ctrl-C, and stretches of code no signal may cut in two

Importing this package imports none of them (the command line's --help stays light).
"""
