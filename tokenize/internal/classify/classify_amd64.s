//go:build amd64 && !purego && !noasm

#include "textflag.h"

// The constants of HALF, each byte repeated 32 times: 0x20, 'a'-1, 'z'+1,
// '0'-1, '9'+1, '\'', '\t', '\n', '\r', DEL.
DATA classifyConsts<>+0(SB)/8, $0x2020202020202020
DATA classifyConsts<>+8(SB)/8, $0x2020202020202020
DATA classifyConsts<>+16(SB)/8, $0x2020202020202020
DATA classifyConsts<>+24(SB)/8, $0x2020202020202020
DATA classifyConsts<>+32(SB)/8, $0x6060606060606060
DATA classifyConsts<>+40(SB)/8, $0x6060606060606060
DATA classifyConsts<>+48(SB)/8, $0x6060606060606060
DATA classifyConsts<>+56(SB)/8, $0x6060606060606060
DATA classifyConsts<>+64(SB)/8, $0x7b7b7b7b7b7b7b7b
DATA classifyConsts<>+72(SB)/8, $0x7b7b7b7b7b7b7b7b
DATA classifyConsts<>+80(SB)/8, $0x7b7b7b7b7b7b7b7b
DATA classifyConsts<>+88(SB)/8, $0x7b7b7b7b7b7b7b7b
DATA classifyConsts<>+96(SB)/8, $0x2f2f2f2f2f2f2f2f
DATA classifyConsts<>+104(SB)/8, $0x2f2f2f2f2f2f2f2f
DATA classifyConsts<>+112(SB)/8, $0x2f2f2f2f2f2f2f2f
DATA classifyConsts<>+120(SB)/8, $0x2f2f2f2f2f2f2f2f
DATA classifyConsts<>+128(SB)/8, $0x3a3a3a3a3a3a3a3a
DATA classifyConsts<>+136(SB)/8, $0x3a3a3a3a3a3a3a3a
DATA classifyConsts<>+144(SB)/8, $0x3a3a3a3a3a3a3a3a
DATA classifyConsts<>+152(SB)/8, $0x3a3a3a3a3a3a3a3a
DATA classifyConsts<>+160(SB)/8, $0x2727272727272727
DATA classifyConsts<>+168(SB)/8, $0x2727272727272727
DATA classifyConsts<>+176(SB)/8, $0x2727272727272727
DATA classifyConsts<>+184(SB)/8, $0x2727272727272727
DATA classifyConsts<>+192(SB)/8, $0x0909090909090909
DATA classifyConsts<>+200(SB)/8, $0x0909090909090909
DATA classifyConsts<>+208(SB)/8, $0x0909090909090909
DATA classifyConsts<>+216(SB)/8, $0x0909090909090909
DATA classifyConsts<>+224(SB)/8, $0x0a0a0a0a0a0a0a0a
DATA classifyConsts<>+232(SB)/8, $0x0a0a0a0a0a0a0a0a
DATA classifyConsts<>+240(SB)/8, $0x0a0a0a0a0a0a0a0a
DATA classifyConsts<>+248(SB)/8, $0x0a0a0a0a0a0a0a0a
DATA classifyConsts<>+256(SB)/8, $0x0d0d0d0d0d0d0d0d
DATA classifyConsts<>+264(SB)/8, $0x0d0d0d0d0d0d0d0d
DATA classifyConsts<>+272(SB)/8, $0x0d0d0d0d0d0d0d0d
DATA classifyConsts<>+280(SB)/8, $0x0d0d0d0d0d0d0d0d
DATA classifyConsts<>+288(SB)/8, $0x7f7f7f7f7f7f7f7f
DATA classifyConsts<>+296(SB)/8, $0x7f7f7f7f7f7f7f7f
DATA classifyConsts<>+304(SB)/8, $0x7f7f7f7f7f7f7f7f
DATA classifyConsts<>+312(SB)/8, $0x7f7f7f7f7f7f7f7f
GLOBL classifyConsts<>(SB), RODATA|NOPTR, $320

// HALF classifies the 32 bytes in register V into the 32-bit masks L
// (letters: 'a'-1 < b|0x20 < 'z'+1), U (upper-case letters: letters with
// b != b|0x20), D (digits: '0'-1 < b < '9'+1), S (' ' and '\t'), SP (' '),
// NL ('\n' and '\r'), AP (the apostrophe) and X (b < 0x20 but not '\t',
// '\n' or '\r', or DEL). The compares are signed: a byte >= 0x80 is
// negative, so it is in no class but X. The constants are in Y6-Y15 (see
// avx2); Y2-Y5 are scratch. Each mask is handed to OUT (LO or HI) as the
// vector of its bytes (0xff in the class, 0 out of it).
#define HALF(V, OUT, L, D, S, SP, NL, AP, X, U) \
	VPOR      Y15, V, Y2  \
	VPCMPGTB  Y14, Y2, Y3 \
	VPCMPGTB  Y2, Y13, Y4 \
	VPAND     Y3, Y4, Y3  \
	OUT(Y3, L)            \
	VPCMPEQB  V, Y2, Y4   \
	VPANDN    Y3, Y4, Y4  \
	OUT(Y4, U)            \
	VPCMPGTB  Y12, V, Y3  \
	VPCMPGTB  V, Y11, Y4  \
	VPAND     Y3, Y4, Y3  \
	OUT(Y3, D)            \
	VPCMPEQB  Y15, V, Y3  \
	OUT(Y3, SP)           \
	VPCMPEQB  Y9, V, Y4   \
	VPOR      Y3, Y4, Y5  \
	OUT(Y5, S)            \
	VPCMPEQB  Y8, V, Y3   \
	VPCMPEQB  Y7, V, Y5   \
	VPOR      Y3, Y5, Y3  \
	OUT(Y3, NL)           \
	VPCMPEQB  Y10, V, Y5  \
	OUT(Y5, AP)           \
	VPCMPGTB  V, Y15, Y5  \
	VPOR      Y4, Y3, Y4  \
	VPANDN    Y5, Y4, Y5  \
	VPCMPEQB  Y6, V, Y3   \
	VPOR      Y3, Y5, Y5  \
	OUT(Y5, X)

// LO puts the low half's mask of the class in M.
#define LO(Y, M) \
	VPMOVMSKB Y, M

// HI puts the high half's mask of the class above the low half's in M
// (BX is scratch), so that the low half's eight masks and the join need
// ten registers, not sixteen.
#define HI(Y, M) \
	VPMOVMSKB Y, BX \
	SHLQ      $32, BX \
	ORQ       BX, M

// func avx2(p *byte, m *Masks)
//
// Masks is eight uint64: L, D, S, SP, NL, AP, X, U. Each is written with
// one 64-bit store, so that reading it back is forwarded from the store.
TEXT ·avx2(SB), NOSPLIT, $0-16
	MOVQ    p+0(FP), SI
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU classifyConsts<>+0(SB), Y15
	VMOVDQU classifyConsts<>+32(SB), Y14
	VMOVDQU classifyConsts<>+64(SB), Y13
	VMOVDQU classifyConsts<>+96(SB), Y12
	VMOVDQU classifyConsts<>+128(SB), Y11
	VMOVDQU classifyConsts<>+160(SB), Y10
	VMOVDQU classifyConsts<>+192(SB), Y9
	VMOVDQU classifyConsts<>+224(SB), Y8
	VMOVDQU classifyConsts<>+256(SB), Y7
	VMOVDQU classifyConsts<>+288(SB), Y6
	HALF(Y0, LO, R8, R9, R10, R11, R12, R13, R14, R15)
	HALF(Y1, HI, R8, R9, R10, R11, R12, R13, R14, R15)
	VZEROUPPER
	MOVQ    m+8(FP), AX
	MOVQ    R8, 0(AX)
	MOVQ    R9, 8(AX)
	MOVQ    R10, 16(AX)
	MOVQ    R11, 24(AX)
	MOVQ    R12, 32(AX)
	MOVQ    R13, 40(AX)
	MOVQ    R14, 48(AX)
	MOVQ    R15, 56(AX)
	RET

// func asciiBlocks(p *byte, n int) int
//
// The length of the ASCII prefix of the n bytes at p (n >= 64) as far as
// 64-byte blocks tell it: n when every byte is below 0x80 (the last block
// read is the one that ends at n, overlapping the one before), else the
// start of the first block with a byte >= 0x80 (the caller looks inside).
TEXT ·asciiBlocks(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ CX, BX
	ANDQ $~63, BX // the end of the whole blocks
	XORQ AX, AX

blocks:
	VMOVDQU   (SI)(AX*1), Y0
	VPOR      32(SI)(AX*1), Y0, Y0
	VPMOVMSKB Y0, DX
	TESTL     DX, DX
	JNZ       done
	ADDQ      $64, AX
	CMPQ      AX, BX
	JB        blocks
	CMPQ      AX, CX
	JEQ       done

	// The last 64 bytes, which end at n.
	VMOVDQU   -64(SI)(CX*1), Y0
	VPOR      -32(SI)(CX*1), Y0, Y0
	VPMOVMSKB Y0, DX
	TESTL     DX, DX
	JNZ       done
	MOVQ      CX, AX

done:
	VZEROUPPER
	MOVQ AX, ret+16(FP)
	RET

// func prefetch(p *byte, n int)
//
// PREFETCHT0 the lines of the n bytes at p, from the one that holds p.
TEXT ·prefetch(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	ADDQ SI, CX

pf:
	CMPQ SI, CX
	JAE  pfdone
	PREFETCHT0 (SI)
	ADDQ $64, SI
	JMP  pf

pfdone:
	RET
