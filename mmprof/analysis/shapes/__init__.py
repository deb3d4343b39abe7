"""Expected and observed GEMM shapes. Takes a ModelSpec and a TP / EP layout (problems: the per-rank problems of
several runtimes' layouts) and a profile's op shapes (gemm_calls, shape_match: regions from matching them); gives
the shape regions that attribution can use and the rows the shape checks judge. Imports attribution/ and timeline/.
"""
