"""Imbalance across ranks. Takes a multi-rank profile's event frame and collectives; gives per rank and phase the step
time, busy time, collective transfer and wait (collectives, imbalance), the straggler of each step and its slow
layer. Imports timeline/ and attribution/.
"""
