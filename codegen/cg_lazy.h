/* cg_lazy.h: libLLVM and NVRTC, opened when codegen first needs them.
 *
 * Every octopipe command links codegen, but only `compile` calls LLVM
 * (host.c) and NVRTC (cuda_kernels.c).  Mapping and relocating the two
 * libraries at start-up took some 120 ms of CPU per run -- ten times the
 * whole work of `octopipe plan` on a small model -- so they are opened with
 * dlopen on first use (cg_llvm_load, cg_nvrtc_load), and the functions
 * codegen calls go through a table of pointers filled then.
 *
 * A file that calls them includes this after the library's own headers:
 * each name of the lists below then stands for its pointer.  A function
 * codegen starts to call goes into its list (the build fails until it does:
 * nothing links the libraries themselves). */
#ifndef OCTO_CG_LAZY_H
#define OCTO_CG_LAZY_H

/* The LLVM C API that host.c calls. */
#define CG_LLVM_FNS(X)                                                                    \
	X(LLVMABISizeOfType) X(LLVMAddCase) X(LLVMAddFunction) X(LLVMAddGlobal)               \
	X(LLVMAddIncoming) X(LLVMAppendBasicBlockInContext) X(LLVMArrayType) X(LLVMBuildAdd)  \
	X(LLVMBuildAlloca) X(LLVMBuildBitCast) X(LLVMBuildBr) X(LLVMBuildCall2)               \
	X(LLVMBuildCondBr) X(LLVMBuildGEP2) X(LLVMBuildICmp) X(LLVMBuildInBoundsGEP2)         \
	X(LLVMBuildIsNull) X(LLVMBuildLoad2) X(LLVMBuildPhi) X(LLVMBuildRet) X(LLVMBuildSExt)  \
	X(LLVMBuildSelect) X(LLVMBuildStore) X(LLVMBuildStructGEP2) X(LLVMBuildSwitch)        \
	X(LLVMBuildZExt) X(LLVMConstArray) X(LLVMConstBitCast) X(LLVMConstInt)                \
	X(LLVMConstNamedStruct) X(LLVMConstNull) X(LLVMConstPointerCast) X(LLVMConstReal)     \
	X(LLVMConstStringInContext) X(LLVMContextCreate) X(LLVMContextDispose)                \
	X(LLVMCreateBuilderInContext) X(LLVMCreatePassBuilderOptions)                         \
	X(LLVMCreateTargetDataLayout) X(LLVMCreateTargetMachine) X(LLVMDisposeBuilder)        \
	X(LLVMDisposeErrorMessage) X(LLVMDisposeMessage) X(LLVMDisposeModule)                 \
	X(LLVMDisposePassBuilderOptions) X(LLVMDisposeTargetData) X(LLVMDisposeTargetMachine) \
	X(LLVMDoubleTypeInContext) X(LLVMFloatTypeInContext) X(LLVMFunctionType)              \
	X(LLVMGetDefaultTargetTriple) X(LLVMGetErrorMessage) X(LLVMGetInsertBlock)            \
	X(LLVMGetNamedFunction) X(LLVMGetParam) X(LLVMGetTargetFromTriple)                    \
	X(LLVMGlobalGetValueType) X(LLVMInt1TypeInContext) X(LLVMInt32TypeInContext)          \
	X(LLVMInt64TypeInContext) X(LLVMInt8TypeInContext) X(LLVMModuleCreateWithNameInContext) \
	X(LLVMOffsetOfElement) X(LLVMPointerType) X(LLVMPositionBuilderAtEnd)                 \
	X(LLVMPrintModuleToFile) X(LLVMRunPasses) X(LLVMSetGlobalConstant) X(LLVMSetInitializer) \
	X(LLVMSetLinkage) X(LLVMSetModuleDataLayout) X(LLVMSetTarget) X(LLVMSetUnnamedAddress) \
	X(LLVMSetValueName2) X(LLVMStructCreateNamed) X(LLVMStructSetBody)                    \
	X(LLVMTargetMachineEmitToFile) X(LLVMVerifyModule) X(LLVMVoidTypeInContext)

/* The NVRTC API that cuda_kernels.c calls. */
#define CG_NVRTC_FNS(X)                                                                   \
	X(nvrtcCreateProgram) X(nvrtcCompileProgram) X(nvrtcDestroyProgram)                   \
	X(nvrtcGetErrorString) X(nvrtcGetPTX) X(nvrtcGetPTXSize) X(nvrtcGetProgramLog)        \
	X(nvrtcGetProgramLogSize)

#define CG_LAZY_PTR(f) __typeof__(&f) f;

#ifdef LLVM_C_CORE_H
struct cg_llvm_fns {
	CG_LLVM_FNS(CG_LAZY_PTR)
};
extern struct cg_llvm_fns cg_llvm;
/* Opens libLLVM once, fills cg_llvm and initialises the native target and
 * its assembly printer (LLVMInitializeNativeTarget and ...AsmPrinter, which
 * are inline calls of the library); 0, or -1 after a diagnostic. */
int cg_llvm_load(void);
#ifndef CG_LAZY_IMPL
#define LLVMABISizeOfType (cg_llvm.LLVMABISizeOfType)
#define LLVMAddCase (cg_llvm.LLVMAddCase)
#define LLVMAddFunction (cg_llvm.LLVMAddFunction)
#define LLVMAddGlobal (cg_llvm.LLVMAddGlobal)
#define LLVMAddIncoming (cg_llvm.LLVMAddIncoming)
#define LLVMAppendBasicBlockInContext (cg_llvm.LLVMAppendBasicBlockInContext)
#define LLVMArrayType (cg_llvm.LLVMArrayType)
#define LLVMBuildAdd (cg_llvm.LLVMBuildAdd)
#define LLVMBuildAlloca (cg_llvm.LLVMBuildAlloca)
#define LLVMBuildBitCast (cg_llvm.LLVMBuildBitCast)
#define LLVMBuildBr (cg_llvm.LLVMBuildBr)
#define LLVMBuildCall2 (cg_llvm.LLVMBuildCall2)
#define LLVMBuildCondBr (cg_llvm.LLVMBuildCondBr)
#define LLVMBuildGEP2 (cg_llvm.LLVMBuildGEP2)
#define LLVMBuildICmp (cg_llvm.LLVMBuildICmp)
#define LLVMBuildInBoundsGEP2 (cg_llvm.LLVMBuildInBoundsGEP2)
#define LLVMBuildIsNull (cg_llvm.LLVMBuildIsNull)
#define LLVMBuildLoad2 (cg_llvm.LLVMBuildLoad2)
#define LLVMBuildPhi (cg_llvm.LLVMBuildPhi)
#define LLVMBuildRet (cg_llvm.LLVMBuildRet)
#define LLVMBuildSExt (cg_llvm.LLVMBuildSExt)
#define LLVMBuildSelect (cg_llvm.LLVMBuildSelect)
#define LLVMBuildStore (cg_llvm.LLVMBuildStore)
#define LLVMBuildStructGEP2 (cg_llvm.LLVMBuildStructGEP2)
#define LLVMBuildSwitch (cg_llvm.LLVMBuildSwitch)
#define LLVMBuildZExt (cg_llvm.LLVMBuildZExt)
#define LLVMConstArray (cg_llvm.LLVMConstArray)
#define LLVMConstBitCast (cg_llvm.LLVMConstBitCast)
#define LLVMConstInt (cg_llvm.LLVMConstInt)
#define LLVMConstNamedStruct (cg_llvm.LLVMConstNamedStruct)
#define LLVMConstNull (cg_llvm.LLVMConstNull)
#define LLVMConstPointerCast (cg_llvm.LLVMConstPointerCast)
#define LLVMConstReal (cg_llvm.LLVMConstReal)
#define LLVMConstStringInContext (cg_llvm.LLVMConstStringInContext)
#define LLVMContextCreate (cg_llvm.LLVMContextCreate)
#define LLVMContextDispose (cg_llvm.LLVMContextDispose)
#define LLVMCreateBuilderInContext (cg_llvm.LLVMCreateBuilderInContext)
#define LLVMCreatePassBuilderOptions (cg_llvm.LLVMCreatePassBuilderOptions)
#define LLVMCreateTargetDataLayout (cg_llvm.LLVMCreateTargetDataLayout)
#define LLVMCreateTargetMachine (cg_llvm.LLVMCreateTargetMachine)
#define LLVMDisposeBuilder (cg_llvm.LLVMDisposeBuilder)
#define LLVMDisposeErrorMessage (cg_llvm.LLVMDisposeErrorMessage)
#define LLVMDisposeMessage (cg_llvm.LLVMDisposeMessage)
#define LLVMDisposeModule (cg_llvm.LLVMDisposeModule)
#define LLVMDisposePassBuilderOptions (cg_llvm.LLVMDisposePassBuilderOptions)
#define LLVMDisposeTargetData (cg_llvm.LLVMDisposeTargetData)
#define LLVMDisposeTargetMachine (cg_llvm.LLVMDisposeTargetMachine)
#define LLVMDoubleTypeInContext (cg_llvm.LLVMDoubleTypeInContext)
#define LLVMFloatTypeInContext (cg_llvm.LLVMFloatTypeInContext)
#define LLVMFunctionType (cg_llvm.LLVMFunctionType)
#define LLVMGetDefaultTargetTriple (cg_llvm.LLVMGetDefaultTargetTriple)
#define LLVMGetErrorMessage (cg_llvm.LLVMGetErrorMessage)
#define LLVMGetInsertBlock (cg_llvm.LLVMGetInsertBlock)
#define LLVMGetNamedFunction (cg_llvm.LLVMGetNamedFunction)
#define LLVMGetParam (cg_llvm.LLVMGetParam)
#define LLVMGetTargetFromTriple (cg_llvm.LLVMGetTargetFromTriple)
#define LLVMGlobalGetValueType (cg_llvm.LLVMGlobalGetValueType)
#define LLVMInt1TypeInContext (cg_llvm.LLVMInt1TypeInContext)
#define LLVMInt32TypeInContext (cg_llvm.LLVMInt32TypeInContext)
#define LLVMInt64TypeInContext (cg_llvm.LLVMInt64TypeInContext)
#define LLVMInt8TypeInContext (cg_llvm.LLVMInt8TypeInContext)
#define LLVMModuleCreateWithNameInContext (cg_llvm.LLVMModuleCreateWithNameInContext)
#define LLVMOffsetOfElement (cg_llvm.LLVMOffsetOfElement)
#define LLVMPointerType (cg_llvm.LLVMPointerType)
#define LLVMPositionBuilderAtEnd (cg_llvm.LLVMPositionBuilderAtEnd)
#define LLVMPrintModuleToFile (cg_llvm.LLVMPrintModuleToFile)
#define LLVMRunPasses (cg_llvm.LLVMRunPasses)
#define LLVMSetGlobalConstant (cg_llvm.LLVMSetGlobalConstant)
#define LLVMSetInitializer (cg_llvm.LLVMSetInitializer)
#define LLVMSetLinkage (cg_llvm.LLVMSetLinkage)
#define LLVMSetModuleDataLayout (cg_llvm.LLVMSetModuleDataLayout)
#define LLVMSetTarget (cg_llvm.LLVMSetTarget)
#define LLVMSetUnnamedAddress (cg_llvm.LLVMSetUnnamedAddress)
#define LLVMSetValueName2 (cg_llvm.LLVMSetValueName2)
#define LLVMStructCreateNamed (cg_llvm.LLVMStructCreateNamed)
#define LLVMStructSetBody (cg_llvm.LLVMStructSetBody)
#define LLVMTargetMachineEmitToFile (cg_llvm.LLVMTargetMachineEmitToFile)
#define LLVMVerifyModule (cg_llvm.LLVMVerifyModule)
#define LLVMVoidTypeInContext (cg_llvm.LLVMVoidTypeInContext)
#endif
#endif

#ifdef __NVRTC_H__
struct cg_nvrtc_fns {
	CG_NVRTC_FNS(CG_LAZY_PTR)
};
extern struct cg_nvrtc_fns cg_nvrtc;
/* Opens NVRTC once and fills cg_nvrtc; 0, or -1 after a diagnostic. */
int cg_nvrtc_load(void);
#ifndef CG_LAZY_IMPL
#define nvrtcCreateProgram (cg_nvrtc.nvrtcCreateProgram)
#define nvrtcCompileProgram (cg_nvrtc.nvrtcCompileProgram)
#define nvrtcDestroyProgram (cg_nvrtc.nvrtcDestroyProgram)
#define nvrtcGetErrorString (cg_nvrtc.nvrtcGetErrorString)
#define nvrtcGetPTX (cg_nvrtc.nvrtcGetPTX)
#define nvrtcGetPTXSize (cg_nvrtc.nvrtcGetPTXSize)
#define nvrtcGetProgramLog (cg_nvrtc.nvrtcGetProgramLog)
#define nvrtcGetProgramLogSize (cg_nvrtc.nvrtcGetProgramLogSize)
#endif
#endif

#endif
