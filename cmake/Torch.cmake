# Finds the installed torch wheel and pybind11 *without importing torch*
# (importing it would run the torch.backends entry point, i.e. load a
# possibly half-built torch_openreg), and exposes them as imported targets
# that every component links:
#
#   openreg::torch         torch's C++ headers and libtorch, libtorch_cpu,
#                          libc10, with the wheel's ABI settings
#   openreg::torch_python  openreg::torch plus libtorch_python
#
# and two functions:
#   openreg_torch_python_module(<name> <sources>...)  a pybind11 module built
#       against torch's bundled pybind11 headers, so that objects (tensors,
#       c10d.Store, ...) cross between it and torch's own bindings
#   openreg_forbid_torch(<target>)  fails the configure step if a torch-free
#       library (the runtime, the collectives core) reaches torch
include_guard(GLOBAL)

find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)

execute_process(
  COMMAND ${Python3_EXECUTABLE} -c
    "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])"
  OUTPUT_VARIABLE TORCH_DIR OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c "import pybind11; print(pybind11.get_cmake_dir())"
  OUTPUT_VARIABLE pybind11_DIR OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
find_package(pybind11 CONFIG REQUIRED)
if(NOT pybind11_VERSION VERSION_LESS 3.1)
  # torch 2.13 bundles pybind11 3.0.x; a 3.1 module cannot exchange objects
  # (e.g. c10d.Store) with torch's bindings.
  message(FATAL_ERROR "pybind11 ${pybind11_VERSION} found; pin pybind11 3.0.x to match torch")
endif()

set(TORCH_LIB_DIR ${TORCH_DIR}/lib)
foreach(lib torch torch_cpu c10 torch_python)
  string(TOUPPER ${lib} LIBVAR)
  find_library(OPENREG_${LIBVAR}_LIB ${lib} PATHS ${TORCH_LIB_DIR} NO_DEFAULT_PATH REQUIRED)
endforeach()

add_library(openreg::torch INTERFACE IMPORTED GLOBAL)
target_include_directories(openreg::torch SYSTEM INTERFACE
  ${TORCH_DIR}/include
  ${TORCH_DIR}/include/torch/csrc/api/include)
# The wheel is built with the C++11 ABI; a mismatch fails at load time with
# undefined std::string symbols.
target_compile_definitions(openreg::torch INTERFACE _GLIBCXX_USE_CXX11_ABI=1)
target_link_libraries(openreg::torch INTERFACE
  ${OPENREG_TORCH_LIB} ${OPENREG_TORCH_CPU_LIB} ${OPENREG_C10_LIB})

add_library(openreg::torch_python INTERFACE IMPORTED GLOBAL)
target_link_libraries(openreg::torch_python INTERFACE openreg::torch ${OPENREG_TORCH_PYTHON_LIB})

function(openreg_torch_python_module name)
  pybind11_add_module(${name} MODULE ${ARGN})
  # torch's bundled pybind11 headers go before pybind11's own (on this very
  # target, so they win over pybind11::module's include directory): both
  # sides of a pybind boundary must agree on the internals layout.
  target_include_directories(${name} BEFORE PRIVATE ${TORCH_DIR}/include)
  target_link_libraries(${name} PRIVATE openreg::torch_python)
endfunction()

# Relative rpath from an installed torch_openreg/lib/ to site-packages/torch/lib.
set(OPENREG_TORCH_RPATH "$ORIGIN/../../torch/lib")

function(openreg_forbid_torch target)
  # Checked at generate time over the target's direct settings and its
  # direct link libraries' interface include directories.
  get_target_property(incs ${target} INCLUDE_DIRECTORIES)
  get_target_property(libs ${target} LINK_LIBRARIES)
  foreach(item IN LISTS incs libs)
    if(item MATCHES "openreg::torch" OR item MATCHES "^${TORCH_DIR}" OR item MATCHES "torch_openreg$")
      message(FATAL_ERROR "${target} must not depend on torch (found '${item}'): "
                          "it is the part a vendor replaces and stays torch-free")
    endif()
    if(TARGET ${item})
      get_target_property(iincs ${item} INTERFACE_INCLUDE_DIRECTORIES)
      foreach(inc IN LISTS iincs)
        if(inc MATCHES "^${TORCH_DIR}")
          message(FATAL_ERROR "${target} reaches torch headers through ${item}")
        endif()
      endforeach()
    endif()
  endforeach()
endfunction()
