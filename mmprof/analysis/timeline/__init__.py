"""When each event ran and what its time was spent on. Takes a Profile; builds its event frame once (events: the device
events with every attribution column and the time category, made by the one list of passes in frame_passes, with
the array helpers of columns and the op nesting of op_tree) and reads it into phases, engine steps, per-step time by
category (breakdown), launch / queue statistics (launch_queue), interval arithmetic and the noise of repeated
timings. Imports attribution/ only.
"""
