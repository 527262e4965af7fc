// The translation unit that precompiles <torch/torch.h> for the rest (cmake/torch_pch.cmake).
