"""What each kernel is and where it belongs. Takes a Profile's tables; gives, per kernel (or per outermost CPU op of a
CPU run), its family / variant / library / path from the kernel-name rules (classify), its region and layer from
annotations, module trees and op shapes (structure), the region of a graph replay from its eager twin (graph_align),
the region of an Inductor-fused kernel (inductor), and its roofline bound from its op's shapes (roofline, flops).
Imports nothing else of analysis/.
"""
