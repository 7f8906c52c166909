"""The NEP4 model: batches, basis, invariants, ZBL, contraction, the analytical potential, autograd, NEPModel."""
